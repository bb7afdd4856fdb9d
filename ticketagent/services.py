"""State changes of tasks and items: `<entity>_<action>()` functions.

Each item runs as a sequence of atomic phases; every phase ends in a
recorded recovery point (checkpoint + event, one transaction). Calls to the
model and to channels sit between phases, never inside one.

Lock order, everywhere: the task row, then the item row, then its effects
(a phase that only records a step locks the item alone and reads the task).
An item is only written by the worker holding its lease (`lease_token`);
every phase checks that token, so a worker whose lease was taken over cannot
write anything. An effect step's recovery point is written in the gate's
phase 2, with the effect's outcome (`effect_run(then=...)`).
"""

import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass, field

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import Count, F
from django.utils import timezone

from ledger.gate import Fenced, effect_run
from ledger.models import Effect, EffectState
from ledger.services import effects_mark_unknown
from ticketagent import jobs
from ticketagent.events import blobs_put, event_append, events_append
from ticketagent.llm import ModelError, Tools, get_model_client, model_label
from ticketagent.models import (
    ACTIVE_TASK_STATUSES,
    ENDED_ITEM_STATUSES,
    Checkpoint,
    Event,
    EventType,
    Item,
    ItemStatus,
    Task,
    TaskStatus,
)
from ticketagent.plan import MODEL_STEPS, PLAN_VERSION, STEPS, SUPPORTED_PLAN_VERSIONS, effect_action, effect_payload
from ticketagent.schemas import SCHEMA_VERSION, Decision, Reply, Triage

log = logging.getLogger(__name__)

if settings.OPENAI_API_KEY:
    # rq forks a work-horse per job from the worker process, which imports
    # this module at start (its recovery pass): importing the SDK here once
    # saves every item ~0.4 s of CPU re-importing it (docs/benchmarks.md, 3).
    import httpx2  # noqa: F401
    import openai  # noqa: F401


class LeaseLost(Fenced):
    """This worker no longer holds the item: stop without writing."""


class ServiceError(Exception):
    """An operator action that cannot be applied; the message says why."""


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _lease_deadline():
    return timezone.now() + timezone.timedelta(seconds=settings.LEASE_SECONDS)


# --------------------------------------------------------------------------- tasks


def task_create(*, rows, name: str, user=None, filename: str = "", allow_auto_close: bool = False,
                notify_channel: str = "helpdesk", failure_threshold: int | None = None,
                source_task: Task | None = None, origins: dict | None = None) -> Task:
    """Create a task and its items in one transaction; enqueue after commit."""
    if not rows:
        raise ServiceError("a task needs at least one ticket")
    now = timezone.now()
    with transaction.atomic():
        task = Task.objects.create(
            name=name[:200] or filename[:200] or "batch", source_filename=filename[:255], created_by=user,
            allow_auto_close=allow_auto_close, notify_channel=notify_channel, model_label=model_label(),
            failure_threshold=failure_threshold or settings.SUSPEND_AFTER_FAILURES, source_task=source_task,
        )
        items = Item.objects.bulk_create([
            Item(task=task, row=r.row, ticket_id=r.ticket_id, customer_email=r.customer_email,
                 customer_name=r.customer_name, subject=r.subject, body=r.body, priority=r.priority,
                 language=r.language, metadata=r.metadata, enqueued_at=now,
                 origin_id=(origins or {}).get(r.ticket_id))
            for r in rows
        ], batch_size=500)
        actor = user.get_username() if user else "system"
        event_append(task_id=task.pk, type=EventType.TASK_CREATED, actor=actor, payload={
            "items": len(items), "filename": filename, "allow_auto_close": allow_auto_close,
            "notify_channel": notify_channel, "failure_threshold": task.failure_threshold,
            "model": task.model_label, "source_task": source_task.pk if source_task else None,
        })
        event_append(task_id=task.pk, type=EventType.PLANNED, actor=actor, payload={
            "plan_version": PLAN_VERSION, "schema_version": SCHEMA_VERSION, "steps": [s.name for s in STEPS],
        })
        refs = [(item.pk, item.attempt) for item in items]
        transaction.on_commit(lambda: jobs.enqueue_items(refs))
    return task


def _task_locked(task_id: int) -> Task:
    return Task.objects.select_for_update().get(pk=task_id)


def _task_maybe_finish(task: Task) -> None:
    """Inside a transaction holding the task lock: close the task when no item
    can move without a person."""
    if task.status not in ACTIVE_TASK_STATUSES:
        return
    # Runs at the end of every item: while items are still queued or running
    # (nearly always), stop at the first one instead of counting the task.
    if task.items.filter(status__in=(ItemStatus.QUEUED, ItemStatus.RUNNING)).exists():
        return
    counts = dict(task.items.values_list("status").annotate(n=Count("*")).values_list("status", "n"))
    if counts.get(ItemStatus.QUEUED) or counts.get(ItemStatus.RUNNING):
        return
    total = sum(counts.values())
    finished = counts.get(ItemStatus.DONE, 0) + counts.get(ItemStatus.SKIPPED, 0)
    task.status = TaskStatus.COMPLETED if finished == total else TaskStatus.NEEDS_REVIEW
    task.final_counts = counts if task.status == TaskStatus.COMPLETED else None
    task.finished_at = timezone.now()
    task.status_reason = "" if task.status == TaskStatus.COMPLETED else (
        f"{total - finished} item(s) wait for a person or failed")
    task.save()
    event_append(task_id=task.pk, type=EventType.TASK_STATUS, payload={"status": task.status, "counts": counts})


def task_pause(*, task_id: int, actor: str) -> Task:
    with transaction.atomic():
        task = _task_locked(task_id)
        if task.status not in ACTIVE_TASK_STATUSES:
            raise ServiceError(f"only a queued or running task can be paused; this one is {task.get_status_display()}")
        task.status = TaskStatus.PAUSED
        task.status_reason = f"paused by {actor}"
        task.save()
        event_append(task_id=task.pk, type=EventType.PAUSED, actor=actor)
    return task


def task_cancel(*, task_id: int, actor: str) -> Task:
    with transaction.atomic():
        task = _task_locked(task_id)
        if task.is_final:
            raise ServiceError(f"this task is already {task.get_status_display()}")
        task.status = TaskStatus.CANCELLED
        task.status_reason = f"cancelled by {actor}"
        task.finished_at = timezone.now()
        task.save()
        skipped = task.items.filter(status=ItemStatus.QUEUED).update(
            status=ItemStatus.SKIPPED, last_error="task cancelled", finished_at=timezone.now())
        event_append(task_id=task.pk, type=EventType.CANCELLED, actor=actor, payload={"skipped_items": skipped})
    return task


# --------------------------------------------------------------------------- resume


@dataclass
class DryRunItem:
    item_id: int
    ticket_id: str
    status: str
    action: str  # recompute | retry | needs_confirmation | continue | done
    steps: list[str] = field(default_factory=list)
    note: str = ""


@dataclass
class DryRun:
    task_id: int
    items: list[DryRunItem]
    totals: dict[str, int]
    blocked_reason: str = ""

    @property
    def will_enqueue(self) -> int:
        return sum(1 for i in self.items if i.action in ("recompute", "retry", "continue"))

    def as_dict(self) -> dict:
        return {"task_id": self.task_id, "totals": self.totals, "blocked_reason": self.blocked_reason,
                "items": [vars(i) for i in self.items]}


RESUMABLE_ITEM_STATUSES = (ItemStatus.QUEUED, ItemStatus.FAILED)


def _incompatible_checkpoints(task: Task) -> int:
    return Checkpoint.objects.filter(task=task).exclude(
        schema_version=SCHEMA_VERSION, plan_version__in=SUPPORTED_PLAN_VERSIONS).count()


def task_dry_run(*, task_id: int) -> DryRun:
    """What resuming would do, item by item, before anything runs."""
    task = Task.objects.get(pk=task_id)
    # Plain tuples, three queries: model instances cost ~10x more per row, and
    # `task.items.only(...)` without `task_id` reloaded every item one by one
    # (Django fetches the deferred FK to attach the known task): 10k queries
    # for a 10k-item task. See docs/benchmarks.md.
    effects_by_item: dict[str, list[tuple[str, str]]] = {}
    for owner_item, owner_step, state in Effect.objects.filter(owner_task=str(task.pk)).order_by().values_list(
            "owner_item", "owner_step", "state"):
        effects_by_item.setdefault(owner_item, []).append((owner_step, state))
    cursors = dict(Checkpoint.objects.filter(task=task).order_by().values_list("item_id", "cursor"))
    out: list[DryRunItem] = []
    totals = {"recompute": 0, "retry": 0, "needs_confirmation": 0, "continue": 0, "done": 0}
    open_states = (EffectState.UNKNOWN, EffectState.INTENT)
    for pk, ticket_id, status in Item.objects.filter(task=task).order_by("row").values_list(
            "id", "ticket_id", "status"):
        effects = effects_by_item.get(str(pk), ())
        if status in (ItemStatus.DONE, ItemStatus.SKIPPED):
            entry = DryRunItem(pk, ticket_id, status, "done")
        elif status == ItemStatus.WAITING_APPROVAL:
            entry = DryRunItem(pk, ticket_id, status, "needs_confirmation", ["close_ticket"],
                               "waits for an operator's approval")
        elif status == ItemStatus.WAITING_REVIEW or any(state in open_states for _, state in effects):
            steps = [step for step, state in effects if state in open_states]
            entry = DryRunItem(pk, ticket_id, status, "needs_confirmation", steps,
                               "unknown effects: resume will not touch them")
        elif status == ItemStatus.RUNNING:
            entry = DryRunItem(pk, ticket_id, status, "continue", [], "running now")
        else:
            cursor = cursors.get(pk, 0)
            redo = [s.name for s in STEPS[cursor:] if s.name in MODEL_STEPS]
            retry = [step for step, state in effects if state == EffectState.FAILED]
            if retry:
                entry = DryRunItem(pk, ticket_id, status, "retry", retry,
                                   "effects that did not happen are tried again with the same key")
            elif redo:
                entry = DryRunItem(pk, ticket_id, status, "recompute", redo)
            else:
                entry = DryRunItem(pk, ticket_id, status, "continue", [s.name for s in STEPS[cursor:]])
        totals[entry.action] += 1
        out.append(entry)
    blocked = ""
    if _incompatible_checkpoints(task):
        blocked = ("checkpoints were written by a plan or schema version this code cannot honour; "
                   "start a new task from the unfinished items")
    elif task.status in (TaskStatus.CANCELLED, TaskStatus.NEEDS_MIGRATION):
        blocked = f"a {task.get_status_display()} task cannot be resumed"
    return DryRun(task_id=task.pk, items=out, totals=totals, blocked_reason=blocked)


def task_resume(*, task_id: int, actor: str) -> DryRun:
    """Re-enqueue what can continue; record RESUMED with who and when."""
    plan = task_dry_run(task_id=task_id)
    with transaction.atomic():
        task = _task_locked(task_id)
        if task.status in (TaskStatus.CANCELLED, TaskStatus.NEEDS_MIGRATION):
            raise ServiceError(f"a {task.get_status_display()} task cannot be resumed")
        if task.status == TaskStatus.COMPLETED:
            raise ServiceError("this task is completed: there is nothing to resume")
        if _incompatible_checkpoints(task):
            task.status = TaskStatus.NEEDS_MIGRATION
            task.status_reason = plan.blocked_reason
            task.save()
            event_append(task_id=task.pk, type=EventType.NEEDS_MIGRATION, actor=actor,
                         payload={"reason": plan.blocked_reason})
            migrate = True
        else:
            migrate = False
            _resume_locked(task, plan, actor)
    if migrate:
        raise ServiceError(plan.blocked_reason)
    return plan


def _resume_locked(task: Task, plan: DryRun, actor: str) -> None:
    now = timezone.now()
    to_enqueue = []
    items = list(Item.objects.select_for_update().filter(task=task, status__in=RESUMABLE_ITEM_STATUSES))
    for item in items:
        item.status = ItemStatus.QUEUED
        item.attempt += 1
        item.enqueued_at = now
        item.last_error = ""
        item.failure_kind = ""
        item.save(update_fields=["status", "attempt", "enqueued_at", "last_error", "failure_kind", "updated_at"])
        to_enqueue.append((item.pk, item.attempt))
    Checkpoint.objects.filter(item__in=[i.pk for i in items]).update(retry_count=F("retry_count") + 1)
    task.status = TaskStatus.RUNNING
    task.status_reason = ""
    task.consecutive_failures = 0
    task.resume_count += 1
    task.finished_at = None
    task.save()
    event_append(task_id=task.pk, type=EventType.RESUMED, actor=actor, payload={
        "resume_count": task.resume_count, "enqueued": len(to_enqueue), "dry_run": plan.totals,
        "items": [pk for pk, _ in to_enqueue],
    })
    _task_maybe_finish(task)
    transaction.on_commit(lambda: jobs.enqueue_items(to_enqueue))


def task_clone_unfinished(*, task_id: int, user=None) -> Task:
    """A new task from the items that did not finish (the needs-migration way out)."""
    from ticketagent.upload import TicketRow

    task = Task.objects.get(pk=task_id)
    unfinished = list(task.items.exclude(status__in=(ItemStatus.DONE, ItemStatus.SKIPPED)).order_by("row"))
    if not unfinished:
        raise ServiceError("every item of this task has finished; there is nothing to carry over")
    rows = [TicketRow(row=i.row, ticket_id=i.ticket_id, customer_email=i.customer_email, subject=i.subject,
                      body=i.body, customer_name=i.customer_name, priority=i.priority, language=i.language,
                      metadata=i.metadata) for i in unfinished]
    origins = {i.ticket_id: (i.origin_id or i.pk) for i in unfinished}
    return task_create(rows=rows, name=f"{task.name} (unfinished items of task {task.pk})", user=user,
                       filename=task.source_filename, allow_auto_close=task.allow_auto_close,
                       notify_channel=task.notify_channel, failure_threshold=task.failure_threshold,
                       source_task=task, origins=origins)


# --------------------------------------------------------------------------- items: operator actions


def item_continue(*, item_id: int, actor: str = "system") -> bool:
    """After a review or reconcile: an item waiting for review continues by
    itself once none of its effects is unknown."""
    with transaction.atomic():
        item = Item.objects.filter(pk=item_id).only("task_id").first()
        if item is None:
            return False
        task = _task_locked(item.task_id)
        item = Item.objects.select_for_update().get(pk=item_id)
        if item.status != ItemStatus.WAITING_REVIEW:
            return False
        if Effect.objects.filter(owner_item=item.ref, state__in=(EffectState.UNKNOWN, EffectState.INTENT)).exists():
            return False
        _item_requeue(item, task, actor=actor, why="its unknown effects were resolved")
    return True


def item_approve(*, item_id: int, approved: bool, reason: str, actor: str) -> Item:
    reason = (reason or "").strip()
    if not reason:
        raise ServiceError("a reason is required to approve or reject")
    with transaction.atomic():
        item = Item.objects.only("task_id").get(pk=item_id)
        task = _task_locked(item.task_id)
        item = Item.objects.select_for_update().get(pk=item_id)
        if item.status != ItemStatus.WAITING_APPROVAL:
            raise ServiceError(f"this item is {item.get_status_display()}, not waiting for approval")
        item.approval = "approved" if approved else "rejected"
        item.approval_by = actor
        item.approval_reason = reason[:2000]
        item.save(update_fields=["approval", "approval_by", "approval_reason", "updated_at"])
        event_append(task_id=task.pk, item_id=item.pk, actor=actor,
                     type=EventType.APPROVED if approved else EventType.REJECTED,
                     payload={"step": "close_ticket", "reason": reason[:500]})
        _item_requeue(item, task, actor=actor, why=f"close_ticket {item.approval}")
    return item


def _item_requeue(item: Item, task: Task, *, actor: str, why: str) -> None:
    item.status = ItemStatus.QUEUED
    item.attempt += 1
    item.enqueued_at = timezone.now()
    item.last_error = ""
    item.save(update_fields=["status", "attempt", "enqueued_at", "last_error", "updated_at"])
    event_append(task_id=task.pk, item_id=item.pk, type=EventType.ITEM_REQUEUED, actor=actor,
                 payload={"attempt": item.attempt, "why": why})
    if task.status == TaskStatus.NEEDS_REVIEW:
        task.status = TaskStatus.RUNNING
        task.finished_at = None
        task.status_reason = ""
        task.save()
        event_append(task_id=task.pk, type=EventType.TASK_STATUS, actor=actor, payload={"status": task.status})
    if task.status in ACTIVE_TASK_STATUSES:
        ref = [(item.pk, item.attempt)]
        transaction.on_commit(lambda: jobs.enqueue_items(ref))


# --------------------------------------------------------------------------- items: the worker side


class Heartbeat(threading.Thread):
    """Extends the lease while a long call runs; notices when it was lost."""

    def __init__(self, item_id: int, token: str):
        super().__init__(daemon=True, name=f"heartbeat-{item_id}")
        self.item_id, self.token = item_id, token
        self.stopped = threading.Event()
        self.lost = False

    def run(self):
        try:
            while not self.stopped.wait(settings.HEARTBEAT_SECONDS):
                try:
                    n = Item.objects.filter(pk=self.item_id, lease_token=self.token,
                                            status=ItemStatus.RUNNING).update(lease_expires_at=_lease_deadline())
                    if not n:
                        self.lost = True
                        return
                except Exception:  # noqa: BLE001 - a failed beat is retried on the next tick
                    log.warning("heartbeat for item %s failed", self.item_id, exc_info=True)
                    close_old_connections()
        finally:
            connection.close()

    def stop(self):
        self.stopped.set()
        self.join(timeout=5)


# item id -> task id: never changes, so a worker looks it up once per item,
# not once per phase (ten phases an item).
_TASK_OF_ITEM: dict[int, int] = {}


def _task_of_item(item_id: int, *, fresh: bool = False) -> int | None:
    task_id = None if fresh else _TASK_OF_ITEM.get(item_id)
    if task_id is None:
        task_id = Item.objects.filter(pk=item_id).values_list("task_id", flat=True).first()
        if task_id is not None:
            if len(_TASK_OF_ITEM) > 10_000:
                _TASK_OF_ITEM.clear()
            _TASK_OF_ITEM[item_id] = task_id
    return task_id


def _lock_held(item_id: int, token: str) -> tuple[Task, Item]:
    """Inside a transaction: lock task and item, or raise LeaseLost."""
    task_id = _task_of_item(item_id)
    task = Task.objects.select_for_update().filter(pk=task_id).first() if task_id is not None else None
    if task is None:
        raise LeaseLost(f"item {item_id} is gone")
    item = Item.objects.select_for_update().filter(pk=item_id, lease_token=token, status=ItemStatus.RUNNING).first()
    if item is None:
        raise LeaseLost(f"item {item_id}: lease {token[:8]} was taken over")
    if item.task_id != task.pk:  # a stale entry (ids reused after a test database flush): look it up again
        _TASK_OF_ITEM.pop(item_id, None)
        return _lock_held(item_id, token)
    return task, item


def _release(item: Item, status: str) -> None:
    item.status = status
    item.lease_token = ""
    item.lease_owner = ""
    item.lease_expires_at = None
    if status in ENDED_ITEM_STATUSES:
        item.finished_at = timezone.now()


def item_take_over(item: Item, *, actor: str, why: str) -> list[Effect]:
    """Inside a transaction holding the item lock: fence the old lease holder and
    turn its intents into unknowns."""
    old = item.lease_owner
    item.lease_token = ""
    item.lease_owner = ""
    item.lease_expires_at = None
    unknown = effects_mark_unknown(owner_item=item.ref, actor=actor,
                                   note=f"{why}; the worker {old or '?'} held it: outcome cannot be known")
    event_append(task_id=item.task_id, item_id=item.pk, type=EventType.RECOVERED, actor=actor, payload={
        "previous_owner": old, "why": why, "unknown_effects": [e.pk for e in unknown],
    })
    return unknown


def _lease_acquire(item_id: int, attempt: int, token: str) -> tuple[str, Item | None, Checkpoint | None]:
    now = timezone.now()
    with transaction.atomic():
        task_id = _task_of_item(item_id, fresh=True)  # looked up at each lease; the phases reuse it
        if task_id is None:
            return "item does not exist", None, None
        task = _task_locked(task_id)
        # the item (locked) and its checkpoint (read) in one statement
        item = Item.objects.select_for_update(of=("self",)).select_related("checkpoint").order_by().get(pk=item_id)
        item.task = task
        if task.status not in ACTIVE_TASK_STATUSES:
            return f"task is {task.status}", None, None
        if item.attempt != attempt:
            return f"stale job: the item is on attempt {item.attempt}", None, None
        if item.status == ItemStatus.RUNNING:
            if item.lease_expires_at and item.lease_expires_at > now:
                return f"item is held by {item.lease_owner}", None, None
            item_take_over(item, actor=_worker_name(), why="lease expired")
        elif item.status != ItemStatus.QUEUED:
            return f"item is {item.status}", None, None
        checkpoint = getattr(item, "checkpoint", None)
        if checkpoint is None:
            # Only the lease holder creates an item's checkpoint, under the
            # item lock: no race, so no get_or_create (and its savepoint).
            checkpoint = Checkpoint.objects.create(
                item=item, task=task, plan_version=PLAN_VERSION, schema_version=SCHEMA_VERSION,
                input_hash=item.input_hash())
        if checkpoint.schema_version != SCHEMA_VERSION or checkpoint.plan_version not in SUPPORTED_PLAN_VERSIONS:
            reason = (f"item {item.ticket_id}: checkpoint has plan v{checkpoint.plan_version} / schema "
                      f"v{checkpoint.schema_version}; this code runs plan v{PLAN_VERSION} / schema v{SCHEMA_VERSION}")
            task.status = TaskStatus.NEEDS_MIGRATION
            task.status_reason = reason
            task.save()
            event_append(task_id=task.pk, item_id=item.pk, type=EventType.NEEDS_MIGRATION, payload={"reason": reason})
            return "needs migration", None, None
        item.lease_token = token
        item.lease_owner = _worker_name()
        item.lease_expires_at = _lease_deadline()
        item.status = ItemStatus.RUNNING
        if checkpoint.input_hash != item.input_hash():
            _item_fail_locked(task, item, kind="input_changed",
                              message="the ticket changed since its checkpoint was written; not continued")
            return "input changed", None, None
        item.save(update_fields=["lease_token", "lease_owner", "lease_expires_at", "status", "updated_at"])
        if task.status == TaskStatus.QUEUED:
            task.status = TaskStatus.RUNNING
            task.started_at = now
            task.save()
            event_append(task_id=task.pk, type=EventType.TASK_STATUS, payload={"status": task.status})
        event_append(task_id=task.pk, item_id=item.pk, type=EventType.ITEM_STARTED, actor=item.lease_owner,
                     payload={"attempt": item.attempt, "cursor": checkpoint.cursor,
                              "plan_version": checkpoint.plan_version,
                              "schema_version": checkpoint.schema_version, "input_hash": checkpoint.input_hash})
        return "", item, checkpoint


def _item_fail_locked(task: Task, item: Item, *, kind: str, message: str) -> None:
    _release(item, ItemStatus.FAILED)
    item.failure_kind = kind
    item.last_error = message[:4000]
    item.save()
    event_append(task_id=task.pk, item_id=item.pk, type=EventType.ITEM_FAILED,
                 payload={"kind": kind, "reason": message[:1000]})
    task.consecutive_failures += 1
    task.save(update_fields=["consecutive_failures", "updated_at"])
    if task.consecutive_failures >= task.failure_threshold and task.status in ACTIVE_TASK_STATUSES:
        label = ModelError.KINDS.get(kind, kind.replace("_", " "))
        task.status = TaskStatus.SUSPENDED
        task.status_reason = f"{task.consecutive_failures} consecutive failures: {label}"
        task.save()
        event_append(task_id=task.pk, type=EventType.SUSPENDED, payload={
            "reason": task.status_reason, "last_success_item": task.last_success_item_id,
        })
    else:
        _task_maybe_finish(task)


@dataclass
class _Run:
    """The worker's side of one leased item. Only the lease holder writes the
    item's checkpoint, so `cursor` and `outputs` are what the database holds;
    they move on once the phase that wrote them has committed."""

    item: Item
    token: str
    cursor: int
    outputs: dict
    task_status: str = ""
    stopped: bool = False


def _phase_fail(run: _Run, *, kind, message):
    with transaction.atomic():
        task, item = _lock_held(run.item.pk, run.token)
        _item_fail_locked(task, item, kind=kind, message=message)


def _phase_wait(run: _Run, *, status, reason, event_type):
    with transaction.atomic():
        task, item = _lock_held(run.item.pk, run.token)
        _release(item, status)
        item.last_error = reason[:4000]
        item.save()
        event_append(task_id=task.pk, item_id=item.pk, type=event_type, payload={"status": status, "reason": reason})
        _task_maybe_finish(task)


def _phase_done(run: _Run, pending=()):
    with transaction.atomic():
        task, item = _lock_held(run.item.pk, run.token)
        if pending:
            _record_steps(run, pending)
        _release(item, ItemStatus.DONE)
        item.last_error = ""
        item.save()
        event_append(task_id=task.pk, item_id=item.pk, type=EventType.ITEM_DONE)
        task.consecutive_failures = 0
        task.last_success_item = item
        task.save(update_fields=["consecutive_failures", "last_success_item", "updated_at"])
        _task_maybe_finish(task)


def _hold(run: _Run) -> None:
    """Inside a transaction: lock the item if this worker still holds its
    lease, and read its task's status (read, not locked: a pause or cancel
    that commits meanwhile is seen by the next phase)."""
    # (model instances, not values_list(): only they keep `OF item`, and
    # locking the task here would invert the lock order)
    held = list(Item.objects.select_for_update(of=("self",)).select_related("task")
                .only("id", "task_id", "task__status").order_by()
                .filter(pk=run.item.pk, lease_token=run.token, status=ItemStatus.RUNNING))
    if not held:
        raise LeaseLost(f"item {run.item.pk}: lease {run.token[:8]} was taken over")
    run.task_status = held[0].task.status


def _record_steps(run: _Run, steps, tool_calls=()) -> tuple[int, dict]:
    """Inside a phase holding the item: persist step outputs and advance the
    cursor, one event each. Returns the new (cursor, outputs)."""
    task_id, item_id = run.item.task_id, run.item.pk
    outputs, cursor = dict(run.outputs), run.cursor
    refs = blobs_put([output for _, output in steps])
    events = []
    for n, ((step, output), ref) in enumerate(zip(steps, refs, strict=True), 1):
        outputs[step] = output
        cursor += 1
        for call in tool_calls if n == len(steps) else ():  # the tool calls belong to the last step
            events.append(Event(task_id=task_id, item_id=item_id, type=EventType.TOOL_CALL,
                                payload={"step": step, **call}))
        events.append(Event(task_id=task_id, item_id=item_id, type=EventType.STEP_DONE,
                            payload={"step": step, "cursor": cursor, "output_ref": ref}))
    events_append(events)
    # No read first: the checkpoint is ours, and the cursor we know is the
    # condition (anything else moved it: stop).
    moved = Checkpoint.objects.filter(item_id=item_id, cursor=run.cursor).update(
        cursor=cursor, step_outputs=outputs, updated_at=timezone.now())
    if moved != 1:
        raise LeaseLost(f"item {item_id}: its checkpoint is not at cursor {run.cursor}")
    return cursor, outputs


def _stop_if_task_stopped(run: _Run) -> bool:
    """Inside a phase holding the item: if its task was paused, suspended or
    cancelled, hand the item back (queued for a resume, or skipped)."""
    if run.task_status in ACTIVE_TASK_STATUSES:
        return False
    cancelled = run.task_status == TaskStatus.CANCELLED
    now = timezone.now()
    Item.objects.filter(pk=run.item.pk).update(
        status=ItemStatus.SKIPPED if cancelled else ItemStatus.QUEUED, lease_token="", lease_owner="",
        lease_expires_at=None, updated_at=now,
        **({"last_error": "task cancelled", "finished_at": now} if cancelled else {}))
    return True


def _phase_step_done(run: _Run, steps, tool_calls=()) -> bool:
    """Persist steps' outputs and advance the cursor. False when the task
    stopped (paused, suspended, cancelled) and the item was handed back."""
    with transaction.atomic():
        _hold(run)
        cursor, outputs = _record_steps(run, steps, tool_calls)
        stopped = _stop_if_task_stopped(run)
    run.cursor, run.outputs = cursor, outputs
    return not stopped


def _ticket(item: Item) -> dict:
    return {"ticket_id": item.ticket_id, "customer_email": item.customer_email,
            "customer_name": item.customer_name, "subject": item.subject, "body": item.body,
            "priority": item.priority, "language": item.language}


def _tools(item: Item) -> Tools:
    import json
    from pathlib import Path

    def customer_tickets():
        others = (Item.objects.filter(task_id=item.task_id, customer_email=item.customer_email)
                  .exclude(pk=item.pk).values("ticket_id", "subject", "status")[:20])
        return list(others)

    def knowledge_base(query: str):
        entries = json.loads((Path(settings.BASE_DIR) / "docs" / "knowledge_base.json").read_text())
        q = query.lower()
        hits = [e for e in entries if e["topic"] == q or any(k in q for k in e["keywords"])]
        return hits[:3] or [e for e in entries if e["topic"] == "other"]

    return Tools(customer_tickets=customer_tickets, knowledge_base=knowledge_base)


def _run_model_step(model, step: str, item: Item, outputs: dict) -> tuple[dict, list]:
    ticket = _ticket(item)
    if step == "triage":
        return model.triage(ticket).model_dump(), []
    triage = Triage.model_validate(outputs["triage"])
    if step == "draft":
        tools = _tools(item)
        reply = model.draft(ticket, triage, tools)
        return reply.model_dump(), tools.calls
    reply = Reply.model_validate(outputs["draft"])
    return model.decide(ticket, triage, reply).model_dump(), []


def _origin_effect(item: Item, step: str) -> Effect | None:
    """For an item carried over from another task: the origin's effect for this step."""
    if not item.origin_id:
        return None
    return (Effect.objects.filter(owner_item=str(item.origin_id), owner_step=step)
            .exclude(state=EffectState.FAILED).order_by("-id").first())


def item_process(*, item_id: int, attempt: int, model=None) -> str:
    """Run an item from its checkpoint. Safe to call any number of times: the
    lease admits one worker, the checkpoint skips finished steps and the
    ledger refuses repeated effects. Returns what happened, for the job log."""
    token = uuid.uuid4().hex
    why, item, checkpoint = _lease_acquire(item_id, attempt, token)
    if item is None:
        return f"no work: {why}"
    heartbeat = Heartbeat(item_id, token)
    heartbeat.start()
    try:
        run = _Run(item=item, token=token, cursor=checkpoint.cursor, outputs=dict(checkpoint.step_outputs))
        return _run_steps(run, model)
    except LeaseLost as exc:
        return f"stopped: {exc}"
    finally:
        heartbeat.stop()


RECORDED = object()  # an effect step whose recovery point was written with the effect's outcome


def _run_steps(run: _Run, model) -> str:
    task = run.item.task
    model = model or get_model_client()
    cursor = run.cursor
    pending: list[tuple[str, dict]] = []  # steps the decision did not choose: persisted with the next phase
    while cursor < len(STEPS):
        step = STEPS[cursor]
        calls = []
        if step.kind == "model":
            try:
                output, calls = _run_model_step(model, step.name, run.item, run.outputs)
            except ModelError as exc:
                _phase_fail(run, kind=exc.kind, message=f"{step.name}: {exc.message}")
                return f"failed at {step.name}: {exc.kind}"
        else:
            decision = Decision.model_validate(run.outputs["decide"])
            if step.name not in decision.actions:
                pending.append((step.name, {"skipped": "not chosen by the decision"}))
                cursor += 1
                continue
            output = _run_effect_step(step.name, run, task, pending)
            if output is None:
                return f"waiting at {step.name}"
            if output is RECORDED:
                pending = []
                cursor += 1
                if run.stopped:
                    return f"task stopped after {step.name}"
                continue
        if not _phase_step_done(run, [*pending, (step.name, output)], calls):
            return f"task stopped after {step.name}"
        pending = []
        cursor += 1
    _phase_done(run, pending)
    return "done"


def _effect_summary(effect: Effect) -> dict:
    return {"effect_id": effect.pk, "key": effect.idempotency_key, "state": effect.state,
            "external_ref": effect.external_ref}


def _run_effect_step(step, run: _Run, task: Task, pending):
    """Returns the step output to record, RECORDED when the gate's phase 2
    recorded it with the effect's outcome, or None when the item stopped
    (failed / waits)."""
    item = run.item
    authorized = ""
    if step == "close_ticket":
        if task.allow_auto_close:
            authorized = "task option: allow automatic close"
        else:
            current = Item.objects.only("approval", "approval_by").get(pk=item.pk)
            if current.approval == "rejected":
                return {"skipped": f"close rejected by {current.approval_by}"}
            if current.approval != "approved":
                _phase_wait(run, status=ItemStatus.WAITING_APPROVAL, event_type=EventType.APPROVAL_REQUESTED,
                            reason="close_ticket is irreversible and waits for an operator's approval")
                return None
            authorized = f"approved by {current.approval_by}"
    if item.attempt > 1:
        # Settled by reconcile or review while the item waited (every way
        # back from waiting is a new attempt): continue from that answer
        # (going through the gate again would count a duplicate).
        resolved = (Effect.objects.filter(owner_item=item.ref, owner_step=step, state__in=(
            EffectState.COMMITTED, EffectState.SKIPPED)).exclude(resolved_by="").first())
        if resolved is not None:
            out = {**_effect_summary(resolved), "resolved_by": resolved.resolved_by}
            if resolved.state == EffectState.SKIPPED:
                out["skipped"] = f"review decided to skip ({resolved.reviewed_by})"
            return out
    origin = _origin_effect(item, step)
    if origin is not None:
        return {"skipped": f"already initiated by item {origin.owner_item} of task {origin.owner_task} "
                           f"({origin.state})", "effect_id": origin.pk}
    recorded = {}

    def record_with_outcome(effect: Effect) -> None:
        # inside phase 2, the item locked by the fence: the step's recovery
        # point commits with the effect's outcome
        if effect.state == EffectState.COMMITTED:
            recorded["checkpoint"] = _record_steps(run, [*pending, (step, _effect_summary(effect))])
            recorded["stopped"] = _stop_if_task_stopped(run)

    result = effect_run(
        action=effect_action(step, notify_channel=task.notify_channel),
        payload=effect_payload(step, ticket=_ticket(item), outputs=run.outputs),
        owner_task=str(task.pk), owner_item=item.ref, owner_step=step, lease_token=run.token,
        fence=lambda: _hold(run), authorized_by=authorized, then=record_with_outcome,
    )
    effect = result.effect
    if result.blocked == "fenced":
        raise LeaseLost(f"item {item.pk}: fenced while calling {step}")
    if "checkpoint" in recorded:
        run.cursor, run.outputs = recorded["checkpoint"]
        run.stopped = recorded["stopped"]
        return RECORDED
    summary = _effect_summary(effect)
    if result.blocked:
        summary["blocked"] = result.blocked
    if effect.state == EffectState.COMMITTED:
        return summary
    if effect.state == EffectState.SKIPPED:
        return {**summary, "skipped": f"review decided to skip ({effect.reviewed_by})"}
    if effect.state == EffectState.FAILED:
        why = "slot taken by another payload (conflict)" if result.blocked == "conflict" else effect.last_error
        _phase_fail(run, kind="channel_refused" if not result.blocked else "conflict", message=f"{step}: {why}")
        return None
    _phase_wait(run, status=ItemStatus.WAITING_REVIEW, event_type=EventType.ITEM_WAITING,
                reason=f"{step}: outcome unknown — {effect.last_error or 'another attempt is in flight'}")
    return None


# --------------------------------------------------------------------------- upload


class UploadRejected(Exception):
    """The file had errors; nothing was created. `errors` lists every one."""

    def __init__(self, errors):
        super().__init__(f"{len(errors)} error(s) in the file")
        self.errors = errors


def task_upload(*, data: bytes, filename: str, user=None, name: str = "", allow_auto_close: bool = False,
                notify_channel: str = "helpdesk", failure_threshold: int | None = None) -> Task:
    """Parse and validate a whole batch; create the task only if every row is good."""
    from ticketagent.upload import parse_batch

    result = parse_batch(data, filename, max_bytes=settings.UPLOAD_MAX_BYTES, max_rows=settings.UPLOAD_MAX_ROWS)
    if not result.ok:
        raise UploadRejected(result.errors)
    return task_create(rows=result.rows, name=name or filename, user=user, filename=filename,
                       allow_auto_close=allow_auto_close, notify_channel=notify_channel,
                       failure_threshold=failure_threshold)
