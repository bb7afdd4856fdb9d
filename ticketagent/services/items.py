"""Operator actions on items: requeue (retry, continue after review, approval), skip, decide on held actions."""

from django.db import transaction
from django.db.models import CharField, Exists, OuterRef
from django.db.models.functions import Cast
from django.utils import timezone

from ledger.models import Effect, EffectState
from ticketagent.eventlog.append import event_append, events_append
from ticketagent.models import (
    ACTIVE_TASK_STATUSES,
    Approval,
    Checkpoint,
    Event,
    EventType,
    Item,
    ItemStatus,
    Task,
    TaskStatus,
)
from ticketagent.plan import held_for_approval
from ticketagent.services import ServiceError
from ticketagent.services.tasks import task_locked, task_maybe_finish
from ticketagent.signals import items_runnable

# A failed item is retried or skipped by an operator while its task waits for a
# person or runs; a suspended or paused task is resumed instead (its dry-run
# shows what that retries).
ITEM_ACTION_TASK_STATUSES = (TaskStatus.NEEDS_REVIEW, TaskStatus.RUNNING, TaskStatus.QUEUED)


def _failed_item_locked(item_id: int, verb: str) -> tuple[Task, Item]:
    """Inside a transaction: the task and the failed item, locked in that order, or ServiceError."""
    item = Item.objects.only("task_id").filter(pk=item_id).first()
    if item is None:
        raise ServiceError("no such item")
    task = task_locked(item.task_id)
    item = Item.objects.select_for_update(no_key=True).get(pk=item_id)
    if item.status != ItemStatus.FAILED:
        raise ServiceError(f"this item is {item.get_status_display()}, not failed: there is nothing to {verb}")
    if task.status not in ITEM_ACTION_TASK_STATUSES:
        raise ServiceError(f"its task is {task.get_status_display()}: resume the task instead (its dry-run "
                           f"shows the failed items it retries)")
    return task, item


def item_retry(*, item_id: int, reason: str = "", actor: str) -> Item:
    """An operator sends a failed item back to the queue (its next attempt), recorded with who and why."""
    with transaction.atomic():
        task, item = _failed_item_locked(item_id, "retry")
        why = "retried by an operator" + (f": {reason.strip()[:500]}" if reason and reason.strip() else "")
        items_requeue(task, [item], actor=actor, why=why)
    return item


def item_skip(*, item_id: int, reason: str, actor: str) -> Item:
    """An operator gives up on a failed item: `skipped`, with the reason, and the task may complete."""
    reason = (reason or "").strip()
    if not reason:
        raise ServiceError("a reason is required to skip an item")
    with transaction.atomic():
        task, item = _failed_item_locked(item_id, "skip")
        item.status = ItemStatus.SKIPPED
        item.finished_at = timezone.now()
        item.save(update_fields=["status", "finished_at", "updated_at"])
        event_append(task_id=task.pk, item_id=item.pk, type=EventType.ITEM_SKIPPED, actor=actor,
                     payload={"status": ItemStatus.SKIPPED, "reason": reason[:1000], "was": ItemStatus.FAILED})
        task_maybe_finish(task)
    return item


def items_continuable():
    """Items waiting for review none of whose effects is still open (`intent` or `unknown`): one NOT EXISTS
    query, the one definition behind every continue (a resolved effect's event, the sweep's safety net)."""
    open_effect = Effect.objects.filter(owner_item=Cast(OuterRef("pk"), CharField()),
                                        state__in=(EffectState.UNKNOWN, EffectState.INTENT))
    return Item.objects.filter(status=ItemStatus.WAITING_REVIEW).filter(~Exists(open_effect))


def item_continue(*, item_id: int, actor: str = "system") -> bool:
    """After a review or reconcile: an item waiting for review continues by
    itself once none of its effects is open (`items_continuable`)."""
    with transaction.atomic():
        item = Item.objects.filter(pk=item_id).only("task_id").first()
        if item is None:
            return False
        task = task_locked(item.task_id)
        item = items_continuable().select_for_update(no_key=True).filter(pk=item_id).first()
        if item is None:
            return False
        items_requeue(task, [item], actor=actor, why="its unknown effects were resolved")
    return True


def item_held_actions(item: Item, task: Task) -> list[str]:
    """The actions of an item that wait for a person's approval (the rules', a failed reply check's, a close)."""
    checkpoint = Checkpoint.objects.filter(item_id=item.pk).only("step_outputs").first()
    outputs = checkpoint.step_outputs if checkpoint else {}
    if "decide" not in outputs:
        return []
    return list(held_for_approval(outputs["decide"], allow_auto_close=task.allow_auto_close))


DECISIONS = {Approval.APPROVED: "approve", Approval.REJECTED: "reject, do the rest",
             Approval.STOPPED: "reject, stop the item"}


def item_approve(*, item_id: int, decision: str, reason: str, actor: str) -> Item:
    """An operator's recorded decision on the actions an item holds for approval (one decision covers them
    all), with who, when and why. Approved (`Approval.APPROVED`): they run. Rejected, the operator chooses
    what happens to the item: it does the rest without them and without the steps that need them
    (`Approval.REJECTED`; `plan.after_rejection` is the rule), or it stops there (`Approval.STOPPED`):
    skipped, with the reason, and nothing more of it runs."""
    reason = (reason or "").strip()
    if decision not in DECISIONS:
        raise ServiceError("choose approve or reject (doing the rest, or stopping the item)")
    if not reason:
        raise ServiceError("a reason is required to approve or reject")
    with transaction.atomic():
        item = Item.objects.only("task_id").get(pk=item_id)
        task = task_locked(item.task_id)
        item = Item.objects.select_for_update(no_key=True).get(pk=item_id)
        if item.status != ItemStatus.WAITING_APPROVAL:
            raise ServiceError(_not_waiting(item))
        held = item_held_actions(item, task)
        item.approval, item.approval_by, item.approval_at = decision, actor, timezone.now()
        item.approval_reason = reason[:2000]
        fields = ["approval", "approval_by", "approval_reason", "approval_at", "updated_at"]
        payload = {"actions": held, "reason": reason[:500], "decision": decision}
        if decision == Approval.STOPPED:  # the item ends here: one event records the decision and the end
            item.status, item.finished_at = ItemStatus.SKIPPED, item.approval_at
            item.last_error = f"stopped: {', '.join(held) or 'held actions'} rejected by {actor}: {reason[:500]}"
            item.save(update_fields=[*fields, "status", "finished_at", "last_error"])
            event_append(task_id=task.pk, item_id=item.pk, actor=actor, type=EventType.REJECTED,
                         payload={**payload, "status": ItemStatus.SKIPPED})
            task_maybe_finish(task)
            return item
        item.save(update_fields=fields)
        event_append(task_id=task.pk, item_id=item.pk, actor=actor, payload=payload,
                     type=EventType.APPROVED if decision == Approval.APPROVED else EventType.REJECTED)
        items_requeue(task, [item], actor=actor,
                      why=f"{', '.join(held) or 'held actions'} {item.get_approval_display()}")
    return item


def _not_waiting(item: Item) -> str:
    """Why a decision on a stale page changes nothing: what was decided meanwhile, by whom, when."""
    now = f"this item is {item.get_status_display().lower()} now, not waiting for approval: nothing changed"
    if item.approval and item.approval_at:
        at = timezone.localtime(item.approval_at).strftime("%H:%M:%S")
        return f"already decided by {item.approval_by} at {at} ({item.get_approval_display()}); {now}"
    return now


def items_requeue(task: Task, items: list[Item], *, actor: str, why: str) -> list[tuple[int, int]]:
    """The one way an item goes back to the queue: its next attempt.

    Inside a transaction holding the task and the items' locks: each item
    becomes `queued` with attempt + 1 (the job id changes with it, so an old
    job of the item finds itself stale), an ITEM_REQUEUED event each; a task
    waiting for review runs again; the items wait in the database for the
    task's window (topped up here, sent after commit) if the task is active.
    Returns the (item id, attempt) pairs. Of a cancelled task, which never
    runs again, the items end `skipped` instead (`_items_cancelled`).
    """
    if task.status == TaskStatus.CANCELLED:
        _items_cancelled(task, items, actor=actor, why=why)
        return []
    now = timezone.now()
    for item in items:
        item.status = ItemStatus.QUEUED
        item.attempt += 1
        item.enqueued_at = None  # not sent yet: the window sends it
        item.last_error = ""
        item.failure_kind = ""
        item.lease_clear()
        item.updated_at = now
    Item.objects.bulk_update(items, ["status", "attempt", "enqueued_at", "last_error", "failure_kind",
                                     *Item.LEASE_FIELDS, "updated_at"])
    events_append([Event(task_id=task.pk, item_id=item.pk, type=EventType.ITEM_REQUEUED, actor=actor,
                         payload={"attempt": item.attempt, "why": why}) for item in items])
    if task.status == TaskStatus.NEEDS_REVIEW:
        task.status = TaskStatus.RUNNING
        task.finished_at = None
        task.status_reason = ""
        task.save()
        event_append(task_id=task.pk, type=EventType.TASK_STATUS, actor=actor, payload={"status": task.status})
    refs = [(item.pk, item.attempt) for item in items]
    if task.status in ACTIVE_TASK_STATUSES and refs:
        items_runnable.send(sender=Task, task_id=task.pk, front=False)
    return refs


def _items_cancelled(task: Task, items: list[Item], *, actor: str, why: str) -> None:
    """Items of a cancelled task that would go back to the queue (taken over from a dead worker, handed back,
    released by a review): `skipped`, as their worker skips them at its next step, an ITEM_SKIPPED event each."""
    now = timezone.now()
    for item in items:
        item.status = ItemStatus.SKIPPED
        item.finished_at = item.updated_at = now
        item.last_error = "task cancelled"
        item.failure_kind = ""
        item.lease_clear()
    Item.objects.bulk_update(items, ["status", "finished_at", "last_error", "failure_kind", *Item.LEASE_FIELDS,
                                     "updated_at"])
    events_append([Event(task_id=task.pk, item_id=item.pk, type=EventType.ITEM_SKIPPED, actor=actor,
                         payload={"status": ItemStatus.SKIPPED, "reason": "task cancelled", "instead_of": why})
                   for item in items])
