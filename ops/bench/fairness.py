"""Figure 9: fair queues — a small task behind a big one, and cancelling the big one.

W workers (one of them holding the recovery sweep, as deployed) and a model server answering each item in 1 s
in all (⅓ s a call), as deployed:

1. a `fair_small`-ticket task uploaded alone (`task_upload`, the upload
   path): its completion time, upload to last item's end;
2. a `fair_big`-item task created, and once W of its items run, the same
   small task uploaded again: the time until its first `ITEM_STARTED`
   (target ≤ 5 s) and its completion against the alone run's (≤ 2×). Each
   is waited for `fair_wait` seconds at most; a figure not reached by then
   is reported as "> fair_wait" and missed;
3. the big task cancelled through its page (POST, Django's test client):
   1 s after the cancel answered, how many of its jobs the Redis queues
   still hold (every `rq:queue:*` list, by job id); once its running items
   ended, how many of its items recorded `ITEM_STARTED` after the cancel
   answered (both targets: 0).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import redis
from django.conf import settings
from django.utils import timezone

from ops.bench.upload_web import csv_bytes
from ops.bench.workload import operator_client, wait_task_ended
from ops.samples import ticket_rows
from ticketagent.models import Event, EventType, Item, ItemStatus, Task
from ticketagent.scheduling import jobs
from ticketagent.services.tasks import task_create
from ticketagent.services.upload import task_upload

if TYPE_CHECKING:
    from ops.bench.runner import Bench


def run(bench: Bench) -> None:
    s = bench.sizes
    w = s.fair_workers
    bench.log(f"== 9 fair queues: a {s.fair_small}-ticket task behind a {s.fair_big:,}-item task, {w} workers, "
              "model 1 s per item")
    server, base_url = bench.procs.start_model_server(1 / 3)
    env = {"OPENAI_API_KEY": "bench-key", "OPENAI_BASE_URL": base_url, "OPENAI_MAX_RETRIES": "0",
           "OPENAI_TIMEOUT": "30"}
    workers = bench.procs.start_workers(w, env)
    try:
        bench.procs.wait_workers_ready(workers)
        raw = bench.results.raw.setdefault("fairness", {"workers": w, "big": s.fair_big, "small": s.fair_small})
        raw["alone"] = _small(bench, "alone", s.fair_wait)
        big = task_create(rows=ticket_rows(s.fair_big, "FB", bench.rng), name="bench fairness big",
                          allow_auto_close=True, failure_threshold=s.fair_big + 1)
        _wait_started(big, w, timeout=60)
        raw["behind"] = _small(bench, "behind", s.fair_wait)
        raw["cancel"] = _cancel(bench, big)
        _record(bench, raw)
    finally:
        bench.procs.stop_workers(workers)
        bench.procs.stop_other(server)
        bench.flush_redis()


def _small(bench: Bench, label: str, cap: float) -> dict:
    n = bench.sizes.fair_small
    t0 = time.time()
    task = task_upload(data=csv_bytes(n, f"FS{label[0].upper()}{int(t0)}"), filename=f"fair-{label}.csv",
                       name=f"bench fairness small {label}", allow_auto_close=True, failure_threshold=n + 1)
    first = None
    deadline = t0 + cap
    while first is None and time.time() < deadline:
        first = Event.objects.filter(item__task=task, type=EventType.ITEM_STARTED).order_by("id").first()
        time.sleep(0.05)
    out = {"task": task.pk, "first_start_s": first.timestamp.timestamp() - t0 if first else None}
    try:
        out["completion_s"] = wait_task_ended(task.pk, n, timeout=max(deadline - time.time(), 0.1)) - t0
    except TimeoutError:
        out["completion_s"] = None
    bench.log(f"  small task {label}: first item started after {out['first_start_s']}, "
              f"completed after {out['completion_s']} (s; None: not within {cap:.0f} s)")
    return out


def _wait_started(task: Task, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while Event.objects.filter(item__task=task, type=EventType.ITEM_STARTED).count() < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the big task's items did not start within {timeout:.0f}s")
        time.sleep(0.1)


def queued_jobs_of(item_ids: set[int]) -> int:
    """Jobs of these items still waiting in any rq queue of the bench's Redis DB."""
    conn: redis.Redis = jobs.get_queue().connection
    n = 0
    for key in conn.scan_iter(match="rq:queue:*", count=1000):
        if conn.type(key) != b"list":
            continue
        for raw in conn.lrange(key, 0, -1):
            job_id = raw.decode()
            if job_id.startswith("item-") and int(job_id.split("-")[1]) in item_ids:
                n += 1
    return n


def _cancel(bench: Bench, big: Task) -> dict:
    ids = set(Item.objects.filter(task=big).values_list("pk", flat=True))
    before = queued_jobs_of(ids)
    response = operator_client().post(f"/tasks/{big.pk}/cancel/")
    answered = timezone.now()
    if response.status_code >= 400:
        raise RuntimeError(f"cancel answered {response.status_code}")
    time.sleep(max(answered.timestamp() + 1.0 - time.time(), 0))
    left = queued_jobs_of(ids)
    deadline = time.monotonic() + settings.LEASE_SECONDS * 2 + 5
    while Item.objects.filter(task=big, status=ItemStatus.RUNNING).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # a job popped just before the cancel has had time to start, or not
    started_after = Event.objects.filter(item__task=big, type=EventType.ITEM_STARTED, timestamp__gt=answered).count()
    out = {"jobs_before": before, "jobs_left_after_1s": left, "started_after_cancel": started_after}
    bench.log(f"  cancel: {before} jobs queued before, {left} left 1 s after the answer; "
              f"{started_after} item(s) started after it")
    return out


def _record(bench: Bench, raw: dict) -> None:
    s = bench.sizes
    alone, behind, cancel = raw["alone"], raw["behind"], raw["cancel"]
    big = f"{s.fair_big:,}-item task"
    first = behind["first_start_s"]
    bench.results.add("9", f"a {s.fair_small}-ticket task uploaded behind a running {big} ({raw['workers']} workers): "
                      "its first item starts after",
                      f"**{first:.1f} s**" if first is not None else f"**> {s.fair_wait:.0f} s** (not started)",
                      "≤ 5 s", first is not None and first <= 5)
    done, solo = behind["completion_s"], alone["completion_s"]
    if done is not None and solo:
        result, ok = f"{done:.1f} vs {solo:.1f} s = **{done / solo:.1f}×**", done / solo <= 2
    else:
        alone_text = f"{solo:.1f} s" if solo else f"> {s.fair_wait:.0f} s"
        result, ok = f"**> {s.fair_wait:.0f} s** (not completed) vs {alone_text} alone", False
    bench.results.add("9", "… its completion time vs the same task alone", result, "≤ 2×", ok)
    bench.results.add("9", f"cancel of the {big}: its jobs still in Redis 1 s after the cancel answered",
                      f"**{cancel['jobs_left_after_1s']:,}** (of {cancel['jobs_before']:,} before)", "0",
                      cancel["jobs_left_after_1s"] == 0)
    bench.results.add("9", "… its items started (`ITEM_STARTED`) after the cancel answered",
                      f"**{cancel['started_after_cancel']}**", "0", cancel["started_after_cancel"] == 0)
