"""How big each benchmark figure runs: the quick, full and tiny presets."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class Sizes:
    name: str
    overhead_items: int = 80
    overhead_workers: tuple[int, ...] = (1, 2, 4)
    gate_ops: int = 300
    latency_workers: tuple[int, ...] = (1, 2, 4)
    latency_items: int = 0  # 0: latency_per_worker x W
    latency_per_worker: int = 5
    latency_fork_items: int = 0  # the forking workers' run; 0: latency_per_worker x W
    latency_per_worker_item: int = 30  # the "1 s per item" reading (items take 1 s, not 3): 30 s a run
    model_latency: float = 1.0
    kill_rounds: int = 3
    dataset_items: int = 100_000
    dataset_big_task: int = 10_000
    dataset_task_size: int = 1_000
    effects_per_item: int = 3
    replay_events: int = 100_000
    dashboard_requests: int = 30
    dryrun_repeats: int = 5
    replay_repeats: int = 1
    peer_items: int = 150  # tickets per run, each side
    peer_workers: tuple[int, ...] = (1, 2, 4)
    peer_repeats: int = 5  # the median of 5 a side: single runs of a CPU-bound pair on 2 cores vary by ±20 %
    writes_items: int = 100
    upload_sizes: tuple[int, ...] = (10_000,)
    fair_big: int = 10_000
    fair_small: int = 10
    fair_workers: int = 4
    fair_wait: float = 60.0  # seconds the small task is waited for, at most
    faults_items: int = 100
    faults_workers: int = 2
    inflight_call_seconds: float = 2.0
    inflight_spread: float = 0.25  # a call's latency drawn from call x (1 ± spread), as a model's varies (0: in step)
    inflight_threads: tuple[int, ...] = (24, 50, 100, 200)  # one process, WORKER_THREADS threads
    inflight_processes: tuple[int, ...] = (8, 16)  # today's workers: one item per process
    inflight_split: tuple[tuple[int, int], ...] = ((2, 50), (2, 100))  # processes x threads: is the bend per process?
    inflight_peer: tuple[int, ...] = (50, 100, 200)  # DBOS, one process, that many workflows at once
    inflight_rounds: int = 5  # tickets per run: rounds x items in flight
    ratelimit_items: int = 1000
    ratelimit_rpm: int = 600
    ratelimit_threads: int = 50
    ratelimit_call_seconds: float = 0.3
    fleet_in_flight: tuple[int, ...] = (8, 100)  # one worker process (the sweep inside) vs one DBOS process
    fleet_call_seconds: float = 0.5
    fleet_slow_call_seconds: float = 2.0  # one process at the largest in-flight count, against ideal
    fleet_repeats: int = 3  # runs a side, alternating; items/s the median, memory the peak
    fleet_rounds: int = 5  # tickets per run: rounds x items in flight


QUICK = Sizes("quick")
FULL = Sizes("full", overhead_items=300, gate_ops=2000, latency_workers=(4, 8, 16, 32), latency_items=1000,
             latency_fork_items=200, kill_rounds=10, dashboard_requests=100, dryrun_repeats=10, replay_repeats=3,
             peer_items=300, writes_items=300, upload_sizes=(10_000, 50_000), fair_workers=8, fair_wait=300.0,
             faults_items=400)
# For the smoke test only: everything, tiny.
TINY = Sizes("tiny", overhead_items=4, overhead_workers=(1,), gate_ops=10, latency_workers=(1,), latency_per_worker=1,
             latency_per_worker_item=1, model_latency=0.05, kill_rounds=1, dataset_items=300, dataset_big_task=100,
             dataset_task_size=50, replay_events=800, dashboard_requests=3, dryrun_repeats=2, replay_repeats=1,
             peer_items=3, peer_workers=(1,), peer_repeats=1, writes_items=3, upload_sizes=(200,), fair_big=60,
             fair_small=2, fair_workers=1, fair_wait=10.0, faults_items=6, faults_workers=1,
             inflight_call_seconds=0.05, inflight_threads=(3,), inflight_processes=(2,), inflight_split=((2, 2),),
             inflight_peer=(3,), inflight_rounds=1, ratelimit_items=4, ratelimit_rpm=6000, ratelimit_threads=2,
             ratelimit_call_seconds=0.05, fleet_in_flight=(2,), fleet_call_seconds=0.05,
             fleet_slow_call_seconds=0.05, fleet_repeats=1, fleet_rounds=1)
SIZES = {s.name: s for s in (QUICK, FULL, TINY)}


def sizes_changed(preset: Sizes, changes: list[str]) -> Sizes:
    """The preset with some sizes changed, each "name=value" in the field's own type: 300, 0.33, "50,100" for a
    tuple, "2x50,4x25" for processes x threads."""
    types = {f.name: getattr(preset, f.name) for f in fields(preset) if f.name != "name"}
    out = {}
    for change in changes:
        name, sep, text = change.partition("=")
        name, text = name.strip(), text.strip()
        if not sep or name not in types:
            raise ValueError(f"{change!r}: expected NAME=VALUE with NAME one of {', '.join(sorted(types))}")
        now = types[name]
        try:
            if isinstance(now, tuple) and now and isinstance(now[0], tuple):
                value = tuple(tuple(int(n) for n in pair.split("x")) for pair in text.split(",") if pair.strip())
            elif isinstance(now, tuple):
                value = tuple(int(n) for n in text.split(",") if n.strip())
            else:
                value = type(now)(text)
        except ValueError:
            raise ValueError(f"{change!r}: {text!r} is not a value for {name} (now {now!r})") from None
        out[name] = value
    return replace(preset, **out)
