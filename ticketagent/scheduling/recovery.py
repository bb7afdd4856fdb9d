"""The recovery sweep: the database is the truth, Redis is transport.

One pass (`recover_once`), run once at worker start and then every
RECOVER_INTERVAL_SECONDS by whichever process holds the sweep
(`ticketagent.scheduling.sweep`: a thread of every worker, or `recover --loop`):

1. items whose lease expired (the worker died or froze): fence the old
   lease_token, turn its `intent` effects into `unknown`, queue the item again;
2. unknown effects on channels with look-up, once the call they guard can
   no longer be in flight: reconcile (the item then continues by itself);
3. queued items whose RQ job vanished (FLUSHALL, Redis restart) or ended
   without taking the item: enqueue again;
4. every active task's window of jobs in Redis: topped up from the items
   waiting in the database (`ticketagent.scheduling.window`);
5. active tasks with nothing left to run: close them.
"""

import datetime as dt
import logging

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone
from rq.job import Job
from rq.utils import utcparse

from ledger.channels import lookup_channel_names
from ledger.clock import db_now
from ledger.models import Effect, EffectState
from ledger.services import effect_reconcile, reconcile_not_before
from ticketagent.eventlog.append import events_append
from ticketagent.models import ACTIVE_TASK_STATUSES, Event, EventType, Item, ItemStatus, Task
from ticketagent.pipeline.lease import item_take_over
from ticketagent.scheduling import jobs
from ticketagent.scheduling.window import windows_refill
from ticketagent.services.items import item_continue, items_continuable, items_requeue
from ticketagent.services.tasks import task_finish_if_idle, task_locked

log = logging.getLogger(__name__)

RECONCILE_EVERY_SECONDS = 15
ENDED_JOB_STATUSES = {"finished", "failed", "stopped", "canceled"}


def recover_expired_leases(now) -> int:
    """Items whose lease expired (`now`: the database's clock, as the
    deadlines are). A task or item another session holds locked -- a worker
    cut off mid-transaction, until its session times out -- is skipped this
    pass (SKIP LOCKED), never waited for: the sweep goes on with the others."""
    count = 0
    expired = Item.objects.filter(status=ItemStatus.RUNNING, lease_expires_at__lt=now).values_list(
        "pk", "task_id")
    for item_id, task_id in list(expired):
        with transaction.atomic():
            task = Task.objects.select_for_update(no_key=True, skip_locked=True).filter(pk=task_id).first()
            item = (Item.objects.select_for_update(no_key=True, skip_locked=True).annotate(db_now=Now())
                    .filter(pk=item_id).first()) if task is not None else None
            if item is None:
                log.info("item %s: its task or row is locked by another session; tried again next pass", item_id)
                continue
            if item.status != ItemStatus.RUNNING or not item.lease_expires_at or item.lease_expires_at >= item.db_now:
                continue
            item_take_over(item, actor="recovery", why="lease expired")
            items_requeue(task, [item], actor="recovery", why="its lease expired")
            count += 1
    return count


def reconcile_unknowns(now) -> int:
    """Unknown effects on channels with look-up whose settle time has passed
    (`now`: the database's clock; `reconcile_not_before`): asked once each,
    and again every RECONCILE_EVERY_SECONDS while the helpdesk cannot tell.
    One not yet settled is not asked: its "not found" would prove nothing."""
    lookup_channels = lookup_channel_names()
    stale = now - timezone.timedelta(seconds=RECONCILE_EVERY_SECONDS)
    # asked lately: in the last RECONCILE_EVERY_SECONDS, about this attempt (a retry, a new intent, is a new
    # question) and once it was settled (an operator's early "Reconcile now" does not hold the sweep back)
    asked_lately = Q(reconciled_at__gt=stale, reconciled_at__gte=F("intent_at")) & (
        Q(settle_after__isnull=True) | Q(reconciled_at__gte=F("settle_after")))
    candidates = (Effect.objects.filter(state=EffectState.UNKNOWN, channel__in=lookup_channels)
                  .exclude(settle_after__gt=now).exclude(asked_lately).order_by("id")[:200])
    resolved = 0
    for effect in list(candidates):
        if reconcile_not_before(effect) > now:
            continue  # an answered call's back-off (no settle time in the row)
        try:
            effect = effect_reconcile(effect_id=effect.pk)
        except Exception:  # noqa: BLE001 - one bad channel must not stop the sweep
            log.exception("reconcile of effect %s failed", effect.pk)
            continue
        resolved += effect.state != EffectState.UNKNOWN
    return resolved


def item_settle_unknowns(item_id: int) -> int:
    """The worker whose item just stopped on an unknown effect: reconcile the
    item's unknowns that may be asked about already (the system answered, so
    nothing more can land; `reconcile_not_before`), and let the item go on
    if that resolved them all. Returns how many were resolved."""
    effects = Effect.objects.filter(owner_item=str(item_id), state=EffectState.UNKNOWN,
                                    channel__in=lookup_channel_names())
    now = db_now()
    resolved = 0
    for effect in effects:
        if reconcile_not_before(effect) > now:
            continue  # may still be in flight: the sweep asks once it cannot land any more
        resolved += effect_reconcile(effect_id=effect.pk).state != EffectState.UNKNOWN
    if resolved:
        item_continue(item_id=item_id, actor="reconcile")
    return resolved


def continue_waiting_items() -> int:
    """Safety net: items waiting for review whose effects are all resolved (`items_continuable`)."""
    return sum(item_continue(item_id=pk, actor="recovery")
               for pk in items_continuable().values_list("pk", flat=True)[:5000])


# why a queued item was sent again without a lease having expired (the Workers page lists these recoveries too)
JOB_MISSING = "its job was missing from Redis"
JOB_STUCK = "its job can no longer take the item"


def requeue_lost_jobs(now) -> int:
    """Queued items whose job cannot run any more: missing from Redis, ended
    without taking the item, or taken by a worker that died before leasing it."""
    grace = now - timezone.timedelta(seconds=settings.REQUEUE_GRACE_SECONDS)
    queued = list(Item.objects.filter(status=ItemStatus.QUEUED, task__status__in=ACTIVE_TASK_STATUSES)
                  .filter(enqueued_at__lt=grace).values_list("pk", "attempt", "task_id", "enqueued_at")[:5000])
    if not queued:
        return 0
    conn = jobs.get_queue().connection
    queues = dict(Task.objects.filter(pk__in={task_id for _, _, task_id, _ in queued})
                  .values_list("pk", "helpdesk_id"))  # each task's queue: its helpdesk's
    pipe = conn.pipeline()
    for pk, attempt, _, _ in queued:
        pipe.hmget(Job.key_for(jobs.job_id(pk, attempt)), ["status", "started_at"])
    answers = pipe.execute()
    stuck_after = timezone.timedelta(seconds=2 * settings.LEASE_SECONDS + settings.REQUEUE_GRACE_SECONDS)
    same_attempt, next_attempt = [], []
    for (pk, attempt, task_id, enqueued_at), (status, started_at) in zip(queued, answers, strict=True):
        status = status.decode() if isinstance(status, bytes) else status
        if status is None:
            same_attempt.append((pk, attempt, task_id))
        elif status in ENDED_JOB_STATUSES:
            next_attempt.append((pk, attempt, task_id))
        elif status == "started" and started_at and _rq_time(started_at) < now - stuck_after:
            next_attempt.append((pk, attempt, task_id))  # its worker died before leasing the item
        elif status == "queued" and enqueued_at < now - stuck_after * 2 and conn.lpos(
                jobs.get_queue(jobs.queue_name(queues.get(task_id))).key, jobs.job_id(pk, attempt)) is None:
            next_attempt.append((pk, attempt, task_id))  # popped by a worker that died at once
    return _enqueue_again(same_attempt) + _requeue_next_attempt(next_attempt)


def _enqueue_again(lost: list[tuple[int, int, int]]) -> int:
    """Jobs missing from Redis: the same attempt, back to waiting for its task's window (no status changes)."""
    if not lost:
        return 0
    with transaction.atomic():
        events_append([Event(task_id=task_id, item_id=pk, type=EventType.ITEM_REQUEUED, actor="recovery",
                             payload={"attempt": attempt, "why": JOB_MISSING})
                       for pk, attempt, task_id in lost])
        Item.objects.filter(pk__in=[pk for pk, _, _ in lost]).update(enqueued_at=None)
    return len(lost)


def _requeue_next_attempt(stuck: list[tuple[int, int, int]]) -> int:
    """Jobs that can no longer take their item: the item's next attempt, task by task."""
    by_task: dict[int, dict[int, int]] = {}
    for pk, attempt, task_id in stuck:
        by_task.setdefault(task_id, {})[pk] = attempt
    n = 0
    for task_id, attempts in by_task.items():
        with transaction.atomic():
            task = task_locked(task_id)
            queued = Item.objects.select_for_update(no_key=True).filter(pk__in=attempts, status=ItemStatus.QUEUED)
            items = [item for item in queued
                     if item.attempt == attempts[item.pk]]  # unchanged since we looked
            n += len(items_requeue(task, items, actor="recovery", why=JOB_STUCK))
    return n


def _rq_time(raw):
    value = utcparse(raw.decode() if isinstance(raw, bytes) else raw)
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def finish_idle_tasks() -> int:
    busy = Item.objects.filter(status__in=(ItemStatus.QUEUED, ItemStatus.RUNNING)).values("task_id")
    idle = Task.objects.filter(status__in=ACTIVE_TASK_STATUSES).exclude(pk__in=busy).values_list("pk", flat=True)
    return sum(task_finish_if_idle(task_id) for task_id in list(idle))


def recover_once() -> dict:
    """One pass. Each part runs by itself: one that fails (a lock it may not
    wait for, Redis down, a statement timed out) is logged and the others
    still run."""
    now = db_now()
    stats = {}
    parts = (("recovered", lambda: recover_expired_leases(now)), ("reconciled", lambda: reconcile_unknowns(now)),
             ("continued", continue_waiting_items), ("requeued", lambda: requeue_lost_jobs(now)),
             ("sent", windows_refill), ("finished_tasks", finish_idle_tasks))
    for name, part in parts:
        try:
            stats[name] = part()
        except Exception as exc:  # noqa: BLE001 - the next pass tries again
            log.warning("recovery: %s failed this pass: %s", name, exc)
            stats[name] = 0
    return stats
