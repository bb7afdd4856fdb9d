"""Figure 5 (SIGKILL): a worker killed mid-item, and how soon the item runs again elsewhere."""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING

import psutil
from django.conf import settings

from ops.bench.workload import wait_task_ended
from ops.processes import Child
from ops.samples import ticket_rows
from ticketagent.models import Checkpoint, Event, EventType, Item, ItemStatus
from ticketagent.services.tasks import task_create

if TYPE_CHECKING:
    from ops.bench.runner import Bench


def run(bench: Bench) -> None:
    s = bench.sizes
    bench.log(f"== 5 SIGKILL mid-item -> running again: {s.kill_rounds} round(s), 2 workers (the sweep in "
              f"one of them), LEASE_SECONDS={settings.LEASE_SECONDS:g}, "
              f"HEARTBEAT_SECONDS={settings.HEARTBEAT_SECONDS:g}, "
              f"RECOVER_INTERVAL_SECONDS={settings.RECOVER_INTERVAL_SECONDS:g}")
    server, base_url = bench.procs.start_model_server(max(s.model_latency, 0.5))
    model_env = {"OPENAI_API_KEY": "bench-key", "OPENAI_BASE_URL": base_url, "OPENAI_MAX_RETRIES": "0",
                 "OPENAI_TIMEOUT": "30"}
    restart, takeover = [], []
    workers = bench.procs.start_workers(2, model_env)
    try:
        bench.procs.wait_workers_ready(workers)
        for round_no in range(1, s.kill_rounds + 1):
            task_id = _round(bench, round_no, workers, restart, takeover)
            # a supervisor restarts the dead worker
            workers += bench.procs.start_workers(1, model_env)
            wait_task_ended(task_id, 1, timeout=60)
            bench.procs.wait_workers_ready(workers)
    finally:
        bench.procs.stop_workers(workers)
        bench.procs.stop_other(server)
    bench.results.raw["kill"] = {"restart_s": restart, "takeover_s": takeover}
    worst = max(restart)
    bench.results.add("5", f"SIGKILL mid-item → running again ({len(restart)} kills)",
                      f"median {statistics.median(restart):.1f} s, max **{worst:.1f} s** "
                      f"(lease taken over after {statistics.median(takeover):.1f} s median)",
                      "≤ 10 s", worst <= 10)


def _round(bench: Bench, round_no: int, workers: list[Child], restart: list[float], takeover: list[float]) -> int:
    """One item; SIGKILL the worker running it once triage is done; time
    until its lease is taken over and until it starts again. Returns the task."""
    task = task_create(rows=ticket_rows(1, f"K{round_no}", bench.rng), name=f"bench kill {round_no}",
                       allow_auto_close=True, failure_threshold=5)
    item = Item.objects.get(task=task)
    current = _wait_mid_item(bench, item, round_no)
    horse_pid = int(current.lease_owner.split(":")[1])  # host:pid:random
    victim = next((c for c in workers if c.poll() is None and (c.pid == horse_pid or horse_pid in {
        p.pid for p in psutil.Process(c.pid).children(recursive=True)})), None)
    if victim is None:
        raise RuntimeError(f"kill round {round_no}: no worker holds pid {horse_pid}")
    last_event = Event.objects.filter(item=item).order_by("-id").values_list("id", flat=True).first()
    t_kill = time.time()
    bench.procs.kill_worker(victim)
    workers.remove(victim)
    deadline = time.monotonic() + 60
    started = None
    while time.monotonic() < deadline:
        started = Event.objects.filter(item=item, type=EventType.ITEM_STARTED, id__gt=last_event).first()
        if started:
            break
        time.sleep(0.05)
    if started is None:
        raise TimeoutError(f"kill round {round_no}: the item did not run again within 60 s")
    recovered = Event.objects.filter(item=item, type=EventType.RECOVERED, id__gt=last_event).first()
    restart.append(started.timestamp.timestamp() - t_kill)
    if recovered:
        takeover.append(recovered.timestamp.timestamp() - t_kill)
    taken = takeover[-1] if recovered else float("nan")
    bench.log(f"  round {round_no}: lease taken over after {taken:.2f} s, running again after {restart[-1]:.2f} s")
    return task.pk


def _wait_mid_item(bench: Bench, item: Item, round_no: int) -> Item:
    """Until the item runs, triage done, waiting on the model for the draft."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        cp = Checkpoint.objects.filter(item=item).values_list("cursor", flat=True).first()
        current = Item.objects.get(pk=item.pk)
        if current.status == ItemStatus.RUNNING and cp and cp >= 1:
            return current
        time.sleep(0.02)
    raise TimeoutError(f"kill round {round_no}: the item never got going; see {bench.workdir}")
