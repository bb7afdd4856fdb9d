"""Items in flight per worker process: a model at 2 s per call, one process with WORKER_THREADS item threads,
beside today's one-item-per-process workers and DBOS Transact running the same pipeline at the same concurrency.

An item makes three model calls, so with C items in flight the ideal is C / (3 x call seconds) items/s (C / 6 s
at 2 s a call). Each run sends `inflight_rounds` x C tickets, so every thread runs several items. Two rates: while
the queue was full (every thread busy: what "C in flight" means; `steady_rate`), and the whole run, with the threads
filling at its start and draining at its end. The model's answers take 2 s on average, each drawn from 2 s x
(1 ± `inflight_spread`) as a real model's vary (0: every item in step with the others). Memory is the peak RSS of
all the processes of a side, sampled once a second: per item in flight, what a thread costs. CPU is what the
side's processes used over the run, in cores (1.00: one core busy all the time), and the machine's, all processes
together: where the rate bends, they say why -- with what each process would need at the ideal rate (ideal items/s
x its CPU an item / processes): one interpreter runs one thread at a time, so a process needing near or above one
core bends, however many threads it has.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import psutil
from django.db import connection

from ops.bench.dbos_peer import DbosPeer
from ops.bench.latency import RssSampler
from ops.bench.workload import task_outcome, wait_task_ended
from ops.samples import ticket_rows
from ticketagent.services.tasks import task_create

if TYPE_CHECKING:
    from ops.bench.runner import Bench


def run(bench: Bench) -> None:
    s = bench.sizes
    call = s.inflight_call_seconds
    bench.log(f"== in flight: a model at {call:g} s per call (3 calls an item: ideal C / {3 * call:g} s items/s)")
    bench.results.raw.setdefault("inflight", {})
    room = _connections_free()
    server, base_url = bench.procs.start_model_server(call, spread=s.inflight_spread)
    env = {"OPENAI_API_KEY": "bench-key", "OPENAI_BASE_URL": base_url, "OPENAI_TIMEOUT": str(max(30.0, call * 5))}
    try:
        for threads in s.inflight_threads:
            if threads + 10 > room:
                bench.results.notes.append(f"in flight: {threads} threads need {threads + 10} PostgreSQL connections, "
                                           f"{room} are free (max_connections): not run")
                continue
            _ours(bench, env, base_url, processes=1, threads=threads)
        for processes in s.inflight_processes:
            _ours(bench, env, base_url, processes=processes, threads=1)
        for processes, threads in s.inflight_split:
            if processes * threads + 10 > room:
                continue
            _ours(bench, env, base_url, processes=processes, threads=threads)
        peer = DbosPeer(bench)
        try:
            for threads in s.inflight_peer:
                if 2 * threads + 10 > room:
                    bench.results.notes.append(f"in flight, DBOS: {threads} workflows at once need about "
                                               f"{2 * threads + 10} connections, {room} are free: not run")
                    continue
                _peer(bench, peer, env, base_url, threads)
        finally:
            peer.close()
    finally:
        bench.procs.stop_other(server)


def _connections_free() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('max_connections')::int - count(*) - 3 FROM pg_stat_activity")
        return int(cursor.fetchone()[0])


class CpuMeter:
    """CPU seconds used by some processes (and their children) and by the whole machine, between start and stop."""

    def __init__(self, pids: list[int]):
        self.pids = pids

    def _used(self) -> float:
        total = 0.0
        for pid in self.pids:
            try:
                parent = psutil.Process(pid)
                for proc in (parent, *parent.children(recursive=True)):
                    times = proc.cpu_times()
                    total += times.user + times.system
            except psutil.NoSuchProcess:
                continue
        return total

    def start(self) -> None:
        self.t0, self.own0, self.machine0 = time.time(), self._used(), psutil.cpu_times()

    def stop(self) -> tuple[float, float]:
        """(cores the processes kept busy, cores the machine kept busy) on average."""
        wall = max(time.time() - self.t0, 1e-6)
        machine = psutil.cpu_times()
        def idle(t):
            return t.idle + getattr(t, "iowait", 0)

        busy = sum(machine) - sum(self.machine0) - (idle(machine) - idle(self.machine0))
        return (self._used() - self.own0) / wall, busy / wall


def steady_rate(times: list[tuple[float, float]], in_flight: int) -> float | None:
    """Items/s while the queue was full (from when all `in_flight` threads were first busy to the last start: before
    it they fill, after it they drain), by Little's law: the items in flight then, on average, over an item's mean
    time from its start to its end. A thread idle between two items (the system's own time) lowers the first;
    `times` is each item's (start, end). None if the run was too short to fill them before its last start."""
    if len(times) < in_flight:
        return None
    starts = sorted(start for start, _ in times)
    full, last = starts[in_flight - 1], starts[-1]
    if last <= full:
        return None
    busy = sum(max(0.0, min(end, last) - max(start, full)) for start, end in times) / (last - full)
    return busy / (sum(end - start for start, end in times) / len(times))


def times_ours(task_id: int) -> list[tuple[float, float]]:
    """Each item's (start, end): its last ITEM_STARTED and its ITEM_DONE."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM max(timestamp) FILTER (WHERE type = 'ITEM_STARTED')), "
                       "extract(epoch FROM max(timestamp) FILTER (WHERE type = 'ITEM_DONE')) FROM ticketagent_event "
                       "WHERE task_id = %s AND type IN ('ITEM_STARTED', 'ITEM_DONE') GROUP BY item_id", [task_id])
        return [(float(a), float(b)) for a, b in cursor.fetchall() if a is not None and b is not None]


def _row(bench: Bench, side: str, in_flight: int, n: int, seconds: float, rss_mb: float, valid: bool,
         cpu: tuple[float, float], steady: float | None, processes: int = 1) -> None:
    s = bench.sizes
    ips = n / seconds
    ideal = in_flight / (3 * s.inflight_call_seconds)
    per = rss_mb / in_flight
    own, machine = cpu
    need = ideal * own * seconds / n / processes  # cores of one process at the ideal rate
    bench.results.raw["inflight"][f"{side}-{in_flight}"] = {
        "items": n, "in_flight": in_flight, "items_per_s": ips, "ideal": ideal, "steady_items_per_s": steady,
        "rss_mb": rss_mb, "rss_mb_per_item_in_flight": per, "cpu_cores": own, "machine_cores": machine,
        "cpu_ms_per_item": 1000 * own * seconds / n, "spread": s.inflight_spread, "processes": processes,
        "cores_per_process_at_ideal": need}
    held = f"{steady:.2f} items/s = {steady / ideal:.2f}×" if steady else "— (run too short)"
    bench.log(f"  {side}, {in_flight} in flight, {n} items: queue full {held}; the whole run {ips:.2f} "
              f"items/s = {ips / ideal:.2f}× (ideal {ideal:.2f}); RSS {rss_mb:.0f} MB in all, {per:.1f} MB per "
              f"item in flight; CPU {own:.2f} cores ({1000 * own * seconds / n:.0f} ms an item), machine "
              f"{machine:.2f} of {psutil.cpu_count()} cores; at the ideal rate a process would need {need:.2f} cores")
    spread = f" ± {s.inflight_spread:.0%}" if s.inflight_spread else ""
    bench.results.add("28", f"{side}: {in_flight} in flight, model {s.inflight_call_seconds:g} s{spread}/call, "
                            f"{n} tickets",
                      "queue full: " + (f"{steady:.2f} items/s = **{steady / ideal:.2f}×** ideal" if steady
                                             else "— (run too short)")
                      + f"; the whole run, filling and draining too: {ips:.2f} items/s = {ips / ideal:.2f}×; "
                      f"RSS {rss_mb:.0f} MB ({per:.1f} MB per item in flight); CPU {own:.2f} cores, machine "
                      f"{machine:.2f} of {psutil.cpu_count()}; at the ideal rate a process would need {need:.2f} cores"
                      + ("" if valid else " (INVALID, see notes)"),
                      "≥ 0.85× ideal (queue full)", valid and steady is not None and steady / ideal >= 0.85)


def calls_made(bench: Bench, base_url: str, before: dict, ended: int, side: str) -> bool:
    """Whether the model answered three calls for each item that ended (a side that skipped its calls -- a
    replayed run, an offline model -- is no measure of the model's speed); if not, a note says so."""
    calls = bench.procs.model_calls(base_url)["completions"] - before["completions"]
    if calls >= 3 * ended:
        return True
    bench.results.notes.append(f"in flight, {side}: {ended} items ended after {calls} model calls, not "
                               f"{3 * ended}: not a measure of the model's speed")
    return False


def ours_measured(bench: Bench, env: dict, base_url: str, *, processes: int, threads: int, n: int,
                  call_seconds: float, prefix: str, label: str):
    """One run of ours, `processes` workers of `threads` item threads each, on `n` tickets: its seconds from the
    task's creation to its end, the workers' RSS sampler, their CPU (own, machine), the task's id and whether the
    run is valid (every item done, with its three model calls; if not, a note says so, under `label`)."""
    in_flight = processes * threads
    procs = bench.procs.start_workers(processes, {**env, "WORKER_THREADS": str(threads)})
    bench.procs.wait_workers_ready(procs)
    time.sleep(0.5)
    sampler, meter = RssSampler(procs), CpuMeter([p.pid for p in procs])
    sampler.start()
    meter.start()
    before = bench.procs.model_calls(base_url)
    t0 = time.time()
    task = task_create(rows=ticket_rows(n, prefix, bench.rng), name=f"bench {label}", allow_auto_close=True,
                       failure_threshold=n + 1)
    end = wait_task_ended(task.pk, n, timeout=120 + 3 * n * call_seconds * 3 / in_flight)
    cpu = meter.stop()
    sampler.stop()
    bench.procs.stop_workers(procs)
    outcome = task_outcome(task.pk)
    valid = outcome.get("done", 0) == n
    if not valid:
        bench.results.notes.append(f"{label}: items ended {outcome} (logs: {bench.workdir})")
    valid = calls_made(bench, base_url, before, outcome.get("done", 0), label) and valid
    return end - t0, sampler, cpu, task.pk, valid


def _ours(bench: Bench, env: dict, base_url: str, *, processes: int, threads: int) -> None:
    s = bench.sizes
    in_flight = processes * threads
    n = s.inflight_rounds * in_flight
    seconds, sampler, cpu, task_id, valid = ours_measured(
        bench, env, base_url, processes=processes, threads=threads, n=n, call_seconds=s.inflight_call_seconds,
        prefix=f"F{processes}x{threads}", label=f"in flight, {processes}x{threads}")
    side = (f"ours, 1 process × WORKER_THREADS={threads}" if processes == 1
            else f"ours, {processes} processes × 1 item (today's workers)" if threads == 1
            else f"ours, {processes} processes × WORKER_THREADS={threads}")
    _row(bench, side, in_flight, n, seconds, sum(sampler.peak_rss.values()) / 2**20, valid, cpu,
         steady_rate(times_ours(task_id), in_flight), processes)


def peer_measured(bench: Bench, peer: DbosPeer, env: dict, base_url: str, *, in_flight: int, n: int,
                  call_seconds: float, prefix: str, label: str):
    """One run of the DBOS peer, one process running `in_flight` workflows at once, on `n` tickets: the run, its
    processes' RSS sampler, its CPU (own, machine) and whether it is valid (every workflow succeeded, with its three
    model calls; if not, a note says so, under `label`)."""
    children = peer.start(1, {**env, "PEER_CONCURRENCY": str(in_flight)})
    sampler, meter = RssSampler(children), CpuMeter([c.pid for c in children])
    sampler.start()
    meter.start()
    try:
        peer.forget_runs()
        before = bench.procs.model_calls(base_url)
        # workflow ids of this run only: DBOS answers an id it has seen with what it recorded
        tag = f"{prefix.lower()}-{in_flight}-{time.time_ns()}"
        done = peer.wait(peer.submit(ticket_rows(n, f"{prefix}{in_flight}", bench.rng), tag),
                         timeout=120 + 3 * n * call_seconds * 3 / in_flight)
    finally:
        cpu = meter.stop()
        sampler.stop()
        peer.stop(children)
    valid = done.statuses.get("SUCCESS", 0) == n
    if not valid:
        bench.results.notes.append(f"{label}: workflows ended {done.statuses}")
    valid = calls_made(bench, base_url, before, done.statuses.get("SUCCESS", 0), label) and valid
    return done, sampler, cpu, valid


def _peer(bench: Bench, peer: DbosPeer, env: dict, base_url: str, threads: int) -> None:
    s = bench.sizes
    n = s.inflight_rounds * threads
    done, sampler, cpu, valid = peer_measured(bench, peer, env, base_url, in_flight=threads, n=n,
                                              call_seconds=s.inflight_call_seconds, prefix="D",
                                              label=f"in flight, DBOS {threads}")
    _row(bench, f"DBOS Transact, 1 process × {threads} workflows", threads, n, done.ended - done.submitted,
         sum(sampler.peak_rss.values()) / 2**20, valid, cpu, steady_rate(peer.times(done), threads))
