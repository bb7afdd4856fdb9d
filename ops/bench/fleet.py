"""Figure 29: the whole fleet against the DBOS peer -- memory, items/s and CPU an item, with the same model client.

A deployment of ours needs one process type: `manage.py worker`, whose processes take turns at the recovery sweep
(nothing else runs beside them). Here one such worker with WORKER_THREADS = C, against one DBOS process running C
workflows at once (`PEER_CONCURRENCY`), each calling the same fake model through the same client (the product's
OpenAI client), three calls an item, `fleet_call_seconds` a call (± `inflight_spread`).

For each C in `fleet_in_flight`, `fleet_repeats` runs a side, alternating, each `fleet_rounds` x C tickets:

* **memory**: the peak RSS and PSS of every process of a side (ours: the worker, the sweep inside it; DBOS: its
  process), sampled once a second -- target: ours <= 1.5x DBOS's, both measures;
* **items/s** while the queue is full (`inflight.steady_rate`), the median of the runs, and each side's CPU an
  item -- target at 50 or more in flight: ours >= 1.0x DBOS's;
* one worker's peak RSS at the largest C -- target <= 150 MB.

Then one process at 100 in flight with the model at `fleet_slow_call_seconds` (2 s) a call: its rate while the
queue is full against the ideal C / (3 x call seconds) -- target >= 0.9x.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ops.bench.dbos_peer import DbosPeer
from ops.bench.inflight import ours_measured, peer_measured, steady_rate, times_ours
from ops.bench.latency import RssSampler

if TYPE_CHECKING:
    from ops.bench.runner import Bench

WORKER_RSS_TARGET_MB = 150


@dataclass
class Run:
    items_per_s: float  # while the queue was full (the whole run's if it never filled)
    cpu_ms_per_item: float
    rss_mb: float  # every process of the side, their peaks summed
    pss_mb: float
    worker_rss_mb: float  # the largest single process
    valid: bool


def run(bench: Bench) -> None:
    s = bench.sizes
    call = s.fleet_call_seconds
    bench.log(f"== fleet: one worker process (the sweep inside) vs one DBOS process, model {call:g} s a call, "
              f"in flight {', '.join(map(str, s.fleet_in_flight))}; {s.fleet_repeats} runs a side, alternating")
    raw = bench.results.raw.setdefault("fleet", {})
    server, base_url = bench.procs.start_model_server(call, spread=s.inflight_spread)
    env = {"OPENAI_API_KEY": "bench-key", "OPENAI_BASE_URL": base_url, "OPENAI_TIMEOUT": str(max(30.0, call * 5))}
    peer = DbosPeer(bench)
    try:
        for in_flight in s.fleet_in_flight:
            ours, theirs = [], []
            for _ in range(s.fleet_repeats):
                ours.append(_ours(bench, env, base_url, in_flight))
                theirs.append(_peer(bench, peer, env, base_url, in_flight))
            raw[str(in_flight)] = {"ours": [r.__dict__ for r in ours], "dbos": [r.__dict__ for r in theirs]}
            _rows(bench, in_flight, ours, theirs)
    finally:
        peer.close()
        bench.procs.stop_other(server)
    _slow(bench)


def _median(runs: list[Run], field: str) -> float:
    return statistics.median(getattr(r, field) for r in runs)


def _rows(bench: Bench, in_flight: int, ours: list[Run], theirs: list[Run]) -> None:
    s = bench.sizes
    valid = all(r.valid for r in ours + theirs)
    invalid = "" if valid else " (INVALID, see notes)"
    rss, their_rss = max(r.rss_mb for r in ours), max(r.rss_mb for r in theirs)
    pss, their_pss = max(r.pss_mb for r in ours), max(r.pss_mb for r in theirs)
    ratio, pss_ratio = rss / their_rss, pss / their_pss
    bench.results.add("29", f"fleet at {in_flight} in flight, every process a side needs (ours: 1 worker, the "
                            f"sweep inside; DBOS: 1 process), peak of {len(ours)} runs",
                      f"RSS {rss:.0f} vs {their_rss:.0f} MB = **{ratio:.2f}×**; PSS {pss:.0f} vs {their_pss:.0f} MB "
                      f"= **{pss_ratio:.2f}×**{invalid}", "≤ 1.5× DBOS (RSS and PSS)",
                      valid and ratio <= 1.5 and pss_ratio <= 1.5)
    ips, their_ips = _median(ours, "items_per_s"), _median(theirs, "items_per_s")
    ideal = in_flight / (3 * s.fleet_call_seconds)
    cpu, their_cpu = _median(ours, "cpu_ms_per_item"), _median(theirs, "cpu_ms_per_item")
    gated = in_flight >= 50
    bench.results.add("29", f"items/s at {in_flight} in flight, model {s.fleet_call_seconds:g} s/call, the same "
                            f"model client (queue full, median of {len(ours)})",
                      f"{ips:.2f} vs {their_ips:.2f} items/s = **{ips / their_ips:.2f}×** (ideal {ideal:.1f}); CPU "
                      f"an item {cpu:.0f} vs {their_cpu:.0f} ms{invalid}",
                      "≥ 1.0× DBOS" if gated else "—", (valid and ips >= their_ips) if gated else None)
    if in_flight == max(s.fleet_in_flight):
        worker = max(r.worker_rss_mb for r in ours)
        bench.results.add("29", f"one worker at {in_flight} in flight, peak RSS (the sweep inside)",
                          f"**{worker:.0f} MB**{invalid}", f"≤ {WORKER_RSS_TARGET_MB} MB",
                          valid and worker <= WORKER_RSS_TARGET_MB)
    bench.log(f"  {in_flight} in flight: RSS {rss:.0f} vs {their_rss:.0f} MB, PSS {pss:.0f} vs {their_pss:.0f} MB, "
              f"{ips:.2f} vs {their_ips:.2f} items/s, CPU {cpu:.0f} vs {their_cpu:.0f} ms an item")


def _measured(sampler: RssSampler, cpu: tuple[float, float], seconds: float, n: int, steady: float | None,
              valid: bool) -> Run:
    own, _machine = cpu
    return Run(items_per_s=steady or n / seconds, cpu_ms_per_item=1000 * own * seconds / n,
               rss_mb=sum(sampler.peak_rss.values()) / 2**20, pss_mb=sum(sampler.peak_pss.values()) / 2**20,
               worker_rss_mb=max(sampler.peak_rss.values(), default=0) / 2**20, valid=valid)


def _ours(bench: Bench, env: dict, base_url: str, in_flight: int, call_seconds: float | None = None) -> Run:
    s = bench.sizes
    n = s.fleet_rounds * in_flight
    seconds, sampler, cpu, task_id, valid = ours_measured(
        bench, env, base_url, processes=1, threads=in_flight, n=n, call_seconds=call_seconds or s.fleet_call_seconds,
        prefix=f"Q{in_flight}", label=f"fleet, ours at {in_flight}")
    run = _measured(sampler, cpu, seconds, n, steady_rate(times_ours(task_id), in_flight), valid)
    bench.log(f"  ours {in_flight}: {run.items_per_s:.2f} items/s, CPU {run.cpu_ms_per_item:.0f} ms an item, "
              f"RSS {run.rss_mb:.0f} MB, PSS {run.pss_mb:.0f} MB")
    return run


def _peer(bench: Bench, peer: DbosPeer, env: dict, base_url: str, in_flight: int) -> Run:
    s = bench.sizes
    n = s.fleet_rounds * in_flight
    done, sampler, cpu, valid = peer_measured(bench, peer, env, base_url, in_flight=in_flight, n=n,
                                              call_seconds=s.fleet_call_seconds, prefix="QD",
                                              label=f"fleet, DBOS at {in_flight}")
    run = _measured(sampler, cpu, done.ended - done.submitted, n, steady_rate(peer.times(done), in_flight), valid)
    bench.log(f"  DBOS {in_flight}: {run.items_per_s:.2f} items/s, CPU {run.cpu_ms_per_item:.0f} ms an item, "
              f"RSS {run.rss_mb:.0f} MB, PSS {run.pss_mb:.0f} MB")
    return run


def _slow(bench: Bench) -> None:
    """One process at the largest in-flight count, the model at `fleet_slow_call_seconds` a call, against ideal."""
    s = bench.sizes
    call, in_flight = s.fleet_slow_call_seconds, max(s.fleet_in_flight)
    server, base_url = bench.procs.start_model_server(call, spread=s.inflight_spread)
    env = {"OPENAI_API_KEY": "bench-key", "OPENAI_BASE_URL": base_url, "OPENAI_TIMEOUT": str(max(30.0, call * 5))}
    try:
        run = _ours(bench, env, base_url, in_flight, call_seconds=call)
    finally:
        bench.procs.stop_other(server)
    ideal = in_flight / (3 * call)
    bench.results.raw.setdefault("fleet", {})["slow"] = {**run.__dict__, "ideal": ideal, "call_seconds": call}
    bench.results.add("29", f"one worker process at {in_flight} in flight, model {call:g} s/call (queue full)",
                      f"{run.items_per_s:.2f} items/s = **{run.items_per_s / ideal:.2f}×** ideal ({ideal:.2f}); CPU "
                      f"an item {run.cpu_ms_per_item:.0f} ms; RSS {run.rss_mb:.0f} MB"
                      + ("" if run.valid else " (INVALID, see notes)"),
                      "≥ 0.9× ideal", run.valid and run.items_per_s / ideal >= 0.9)
