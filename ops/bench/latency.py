"""Figure 3: throughput against a model server with a fixed latency, and peak memory per worker."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import psutil

from ops.bench.profiling import profile_sdk_pipeline
from ops.bench.workload import task_outcome, wait_task_ended
from ops.processes import Child
from ops.samples import ticket_rows
from ticketagent.services.tasks import task_create

if TYPE_CHECKING:
    from ops.bench.runner import Bench


class RssSampler(threading.Thread):
    """Peak RSS (and PSS) per worker, parent + work-horse, sampled once a second."""

    def __init__(self, procs: list[Child], interval: float = 1.0):
        super().__init__(daemon=True)
        self.procs, self.interval = procs, interval
        self.stopped = threading.Event()
        self.peak_rss: dict[int, int] = {}
        self.peak_pss: dict[int, int] = {}
        self.peak_parent: dict[int, int] = {}
        self.peak_horse: dict[int, int] = {}

    def run(self):
        while True:
            self.sample()
            if self.stopped.wait(self.interval):
                return

    def sample(self):
        for proc in self.procs:
            try:
                parent = psutil.Process(proc.pid)
                tree = [parent, *parent.children(recursive=True)]
                rss = [p.memory_info().rss for p in tree]
                pss = sum(getattr(p.memory_full_info(), "pss", 0) for p in tree)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            pid = proc.pid
            self.peak_rss[pid] = max(self.peak_rss.get(pid, 0), sum(rss))
            self.peak_pss[pid] = max(self.peak_pss.get(pid, 0), pss)
            self.peak_parent[pid] = max(self.peak_parent.get(pid, 0), rss[0])
            if len(rss) > 1:
                self.peak_horse[pid] = max(self.peak_horse.get(pid, 0), max(rss[1:]))

    def stop(self):
        """Stops sampling, after a last sample (a run shorter than the interval has one at its start and end)."""
        self.stopped.set()
        self.join(timeout=5)
        self.sample()

    def peaks_mb(self) -> tuple[float, float, float, float]:
        """The worst worker's peak RSS, PSS, parent RSS and work-horse RSS, in MB."""
        return tuple(max(peaks.values(), default=0) / 2**20
                     for peaks in (self.peak_rss, self.peak_pss, self.peak_parent, self.peak_horse))


def run(bench: Bench) -> None:
    """Figure 3, in both readings of "a model server answering in 1 s":
    each call answered in 1 s (an item makes three: ideal W / 3 items/s),
    and each item's answers taking 1 s in all (1/3 s a call: ideal W
    items/s, the target's own "0.9 x W items/s", where our fixed cost per
    item weighs three times as much)."""
    s = bench.sizes
    per_call = s.model_latency
    bench.log(f"== 3 latency-bound: a model answering in {per_call:g} s per call, then in {per_call:g} s per "
              f"item ({per_call / 3:.2g} s per call); 3 calls per item; workers {s.latency_workers}")
    bench.results.raw.setdefault("latency", {})
    worst = {False: (0.0, 0.0), True: (0.0, 0.0)}
    # the default workers (jobs in the worker process), then forking ones (WORKER_FORK=true) once
    runs = [(w, False) for w in s.latency_workers] + [(min(2, max(s.latency_workers)), True)]
    _reading(bench, "call", per_call, runs, worst)
    _reading(bench, "item", per_call / 3, [(w, False) for w in s.latency_workers], worst)
    if "latency" in bench.profile:
        profile_sdk_pipeline(bench)
    for fork, label in ((False, "peak memory per worker (the default: jobs in the worker process)"),
                        (True, "peak memory per forking worker (parent + work-horse, `WORKER_FORK=true`)")):
        rss, pss = worst[fork]
        bench.results.add("3", label, f"RSS **{rss:.0f} MB** (PSS {pss:.0f} MB)", "≤ 120 MB", rss <= 120)


def _reading(bench: Bench, reading: str, call_latency: float, runs, worst) -> None:
    """The runs of one reading against one model server."""
    server, base_url = bench.procs.start_model_server(call_latency)
    model_env = {"OPENAI_API_KEY": "bench-key", "OPENAI_BASE_URL": base_url, "OPENAI_MAX_RETRIES": "0",
                 "OPENAI_TIMEOUT": str(max(30.0, call_latency * 5))}
    try:
        for w, fork in runs:
            _one_run(bench, reading, call_latency, w, fork, model_env, worst)
    finally:
        bench.procs.stop_other(server)


def _one_run(bench: Bench, reading: str, call_latency: float, w: int, fork: bool, model_env: dict, worst) -> None:
    s = bench.sizes
    per_worker = s.latency_per_worker if reading == "call" else s.latency_per_worker_item
    n = (s.latency_fork_items if fork else s.latency_items) or per_worker * w
    procs = bench.procs.start_workers(w, {**model_env, "WORKER_FORK": "true" if fork else "false"})
    bench.procs.wait_workers_ready(procs)
    sampler = RssSampler(procs)
    sampler.start()
    t0 = time.time()
    tag = f"L{reading[0]}{w}{'f' if fork else ''}"
    task = task_create(rows=ticket_rows(n, tag, bench.rng),
                       name=f"bench latency {reading} {w}w{' forking' if fork else ''}",
                       allow_auto_close=True, failure_threshold=n + 1)
    end = wait_task_ended(task.pk, n, timeout=120 + n * call_latency * 3 * 3 / w)
    sampler.stop()
    bench.procs.stop_workers(procs)
    outcome = task_outcome(task.pk)
    valid = outcome.get("done", 0) == n
    kind = "forking worker" if fork else "worker"
    plural = "s" if w > 1 else ""
    if not valid:
        bench.results.notes.append(f"latency, {w} {kind}{plural}: items ended {outcome} — this figure is "
                                   f"not valid (logs: {bench.workdir})")
    ips = n / (end - t0)
    ideal = w / (3 * call_latency)
    rss, pss, parent, horse = sampler.peaks_mb()
    worst[fork] = (max(worst[fork][0], rss), max(worst[fork][1], pss))
    bench.results.raw["latency"][f"{reading}-{w}{'-fork' if fork else ''}"] = {
        "items": n, "call_latency_s": call_latency, "items_per_s": ips, "ideal": ideal, "rss_mb": rss,
        "pss_mb": pss, "parent_rss_mb": parent, "horse_rss_mb": horse, "fork": fork}
    bench.log(f"  {w} {kind}{plural}, {n} items: {ips:.3f} items/s (ideal {ideal:.3f}) = "
              f"{ips / ideal:.2f}×; peak per worker RSS {rss:.0f} MB"
              + (f" (parent {parent:.0f} + horse {horse:.0f})" if fork else "") + f", PSS {pss:.0f} MB")
    if reading == "call":
        figure, target, bar = f"model {call_latency:g} s/call", "≥ 0.9× ideal (W / 3 s)", 0.9
    else:
        figure, target, bar = (f"model {3 * call_latency:g} s per item ({call_latency:.2g} s/call)",
                               "≥ 0.9 × W items/s", 0.9)
    bench.results.add("3", f"{n} tickets, {w} {kind}{plural}, {figure}",
                      f"{ips:.2f} items/s vs ideal {ideal:.2f} = **{ips / ideal:.3f}×**"
                      + ("" if valid else " (INVALID, see notes)"), target, valid and ips / ideal >= bar)
