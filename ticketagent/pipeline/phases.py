"""The phases of an item: each one transaction, holding the item under this worker's lease, ending in a recovery point.

`with phase(run) as locked:` is the one way a worker writes: it opens the
transaction, locks the item if this worker still holds its lease (`LeaseLost`
if not; `locked` is what it locked and read) and, for
a phase that writes the task (an item failed, waiting for a person or handed
back; a success that ends a run of failures; a budget spent), locks the task
first -- one lock order everywhere: the task, then the item. A step's phase
locks only the item and reads the task's status, so a pause or cancel that
commits meanwhile is seen at the next step. A phase in which the item may
end done holds the task as it is (`FOR SHARE`): no item of the task fails
while it ends, so it knows whether it ends a run of failures, and only then
is it taken again with the task locked to write it. Otherwise it writes
nothing of the task's: the task is finished after its commit by whoever
finds no item of it left to run (`task_finish_if_idle`), so the items of a
task never queue behind each other's ends; the lease holds the task the
same way, so they do not queue behind each other's starts either.

A phase function returns how the item ended, in a word or two ("done",
"waiting", "failed (kind)", "task stopped", "handed back"), or "" when it
goes on.
"""

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ledger.keys import canonical_json
from ledger.services import effect_not_sent
from ticketagent.channels.identity import Helpdesk
from ticketagent.eventlog.append import blobs_put, event_append, events_append
from ticketagent.failures import failure_label
from ticketagent.llm.schemas import SCHEMA_VERSION
from ticketagent.models import ACTIVE_TASK_STATUSES, Checkpoint, Event, EventType, Item, ItemStatus, Task, TaskStatus
from ticketagent.pipeline.binding import lease_refusal, needs_binding, task_bind_locked
from ticketagent.pipeline.budget import STOP, Bound, budget_reserve_locked, task_spend_locked
from ticketagent.pipeline.lease import ItemRun, LeaseLost, item_take_over, worker_name
from ticketagent.pipeline.statements import (
    checkpoint_move,
    item_for_lease,
    lock_item,
    lock_task_and_item,
    lock_task_of_item,
)
from ticketagent.plan import PLAN_VERSION, SUPPORTED_PLAN_VERSIONS, not_chosen, steps_ahead, steps_of
from ticketagent.playbooks.spec import SUPPORTED_FORMATS
from ticketagent.services.items import items_requeue
from ticketagent.services.tasks import task_finish_if_idle, task_maybe_finish, task_suspend_locked
from ticketagent.signals import item_started

log = logging.getLogger(__name__)


class TaskToWrite(Exception):
    """A phase holding its task as it is found it must write it after all: nothing was written, and the phase
    is taken again with the task locked."""


@dataclass(frozen=True)
class Locked:
    """What a phase locked and read: its task's status and run of failures as read; with `task=True`, the task
    and the item themselves, locked in that order (`status`: the task's as this phase leaves it)."""

    task_status: str
    task_failures: int
    task: Task | None = None
    item: Item | None = None

    @property
    def status(self) -> str:
        return self.task.status if self.task is not None else self.task_status


@contextmanager
def phase(run: ItemRun, *, task: bool = False, ends: bool = False) -> Iterator[Locked]:
    """One transaction holding the item under this worker's lease (`LeaseLost`
    if it was taken over); with `task`, the task locked first. Yields what it
    locked and read (`Locked`).

    With `ends` (the item may end done in this phase) and not `task`, the
    task is held as it is first (`FOR SHARE`): no item of it fails until this
    phase commits, so `task_failures` is the run this success would end. If
    there is one, `TaskToWrite` is raised before anything is written: the
    caller takes the phase again with `task`."""
    with transaction.atomic():
        if task:
            locked_task, item = lock_task_and_item(run.item.pk, run.token)
            if locked_task is None or item is None:
                raise LeaseLost(f"item {run.item.pk}: lease {run.token[:8]} was taken over, or the item is gone")
            yield Locked(locked_task.status, locked_task.consecutive_failures, locked_task, item)
            return
        if ends:
            lock_task_of_item(run.item.pk, hold=True)
        found = lock_item(run.item.pk, run.token)
        if found is None:
            raise LeaseLost(f"item {run.item.pk}: lease {run.token[:8]} was taken over")
        if ends and found[1]:
            raise TaskToWrite(f"item {run.item.pk}: a success here ends its task's run of failures")
        yield Locked(*found)


def lease_acquire(item_id: int, attempt: int, token: str, *, served: Helpdesk | None = None,
                  why_unknown: str = "") -> tuple[str, Item | None, Checkpoint | None]:
    """Take the item's lease (on PostgreSQL's clock: `now` is the database's).
    The caller notes the monotonic time before calling: the lease is valid
    for LEASE_SECONDS from then (`lease.Lease`). Scheduling is told once it
    has committed (`signals.item_started`: the task's window is topped up).

    The task is held as it is (`FOR SHARE`: a pause or cancel waits for the
    lease, the leases of its other items do not); when the lease finds it
    must write the task -- the first item of a queued task, a checkpoint
    that needs migration, a ticket changed since its checkpoint -- nothing
    is kept and the lease is taken again with the task locked to write.

    `served`: the helpdesk this worker serves (None: it did not say, `why_unknown`). An item of a task bound
    to another is not taken (the reason starts with `binding.NOT_THIS_HELPDESK`), nothing written; a task not
    bound yet is bound to `served` (`binding`)."""
    try:
        return _lease_acquire(item_id, attempt, token, served, why_unknown, write=False)
    except TaskToWrite:
        return _lease_acquire(item_id, attempt, token, served, why_unknown, write=True)


def _lease_acquire(item_id: int, attempt: int, token: str, served, why_unknown: str, *, write: bool):
    with transaction.atomic():
        task = lock_task_of_item(item_id, hold=not write)
        if task is None:
            return "item does not exist", None, None
        found = item_for_lease(item_id)  # the item (locked) and its checkpoint (read) in one statement
        if found is None:
            return "item does not exist", None, None
        item, checkpoint, now = found
        item.task = task
        if task.status not in ACTIVE_TASK_STATUSES:
            return f"task is {task.status}", None, None
        if item.attempt != attempt:
            return f"stale job: the item is on attempt {item.attempt}", None, None
        refusal = lease_refusal(task, item, served, why_unknown=why_unknown)
        if refusal:  # before anything is written (a take-over too)
            return refusal, None, None
        if item.status == ItemStatus.RUNNING:
            if item.lease_expires_at and item.lease_expires_at > now:
                return f"item is held by {item.lease_owner}", None, None
            item_take_over(item, actor=worker_name(), why="lease expired")
        elif item.status != ItemStatus.QUEUED:
            return f"item is {item.status}", None, None
        if (task.status == TaskStatus.QUEUED or needs_binding(task, served)) and not write:
            raise TaskToWrite
        if needs_binding(task, served):
            task_bind_locked(task, served, actor=worker_name())
        if checkpoint is None:
            # Only the lease holder creates an item's checkpoint, under the
            # item lock: no race, so no get_or_create (and its savepoint). By
            # ids: `item=item` would cache each in the other (a reference cycle
            # that holds the item's rows, its playbook's among them, until the
            # interpreter's rare full collection).
            checkpoint = Checkpoint.objects.create(item_id=item.pk, task_id=task.pk, plan_version=PLAN_VERSION,
                                                   playbook_version_id=item.playbook_version_id,
                                                   schema_version=SCHEMA_VERSION, input_hash=item.input_hash())
        if _needs_migration(task, item, checkpoint, write=write):
            return "needs migration", None, None
        _lease_set(item, token, now)
        if checkpoint.input_hash != item.input_hash():
            if not write:
                raise TaskToWrite
            item_fail_locked(task, item, kind="input_changed",
                              message="the ticket changed since its checkpoint was written; not continued")
            return "input changed", None, None
        if task.status == TaskStatus.QUEUED:
            task.status = TaskStatus.RUNNING
            task.started_at = now
            task.save()
            event_append(task_id=task.pk, type=EventType.TASK_STATUS, payload={"status": task.status})
        item.save(update_fields=[*Item.LEASE_FIELDS, "status", "reserved_usd", "reserved_tokens", "updated_at"])
        event_append(task_id=task.pk, item_id=item.pk, type=EventType.ITEM_STARTED, actor=item.lease_owner,
                     payload={"attempt": item.attempt, "cursor": checkpoint.cursor,
                              "plan_version": checkpoint.plan_version, "schema_version": checkpoint.schema_version,
                              "playbook_version": checkpoint.playbook_version_id, "input_hash": checkpoint.input_hash})
        task_id = task.pk
        transaction.on_commit(lambda: item_started.send(sender=Item, task_id=task_id, item_id=item_id))
        return "", item, checkpoint


def _lease_set(item: Item, token: str, now) -> None:
    """The item's new lease (saved by the caller): this worker's, for LEASE_SECONDS on the database's clock."""
    item.lease_token = token
    item.lease_owner = worker_name()
    item.lease_expires_at = now + timezone.timedelta(seconds=settings.LEASE_SECONDS)
    item.status = ItemStatus.RUNNING
    item.reserved_usd, item.reserved_tokens = 0, 0  # a new lease holds no reservation (pipeline/budget.py)


def _needs_migration(task: Task, item: Item, checkpoint: Checkpoint, *, write: bool) -> bool:
    """Inside the lease's transaction: a checkpoint this code cannot honour (its plan, schema or playbook
    format) marks the task as needing migration, with the reason, and the item is not run."""
    playbook_format = item.playbook_version.format
    if (checkpoint.schema_version == SCHEMA_VERSION and checkpoint.plan_version in SUPPORTED_PLAN_VERSIONS
            and playbook_format in SUPPORTED_FORMATS):
        return False
    if not write:
        raise TaskToWrite
    reason = (f"item {item.ticket_id}: checkpoint has plan v{checkpoint.plan_version} / schema "
              f"v{checkpoint.schema_version} / playbook format {playbook_format}; this code runs plan "
              f"v{PLAN_VERSION} / schema v{SCHEMA_VERSION} / playbook formats "
              f"{', '.join(map(str, sorted(SUPPORTED_FORMATS)))}")
    task.status = TaskStatus.NEEDS_MIGRATION
    task.status_reason = reason
    task.save()
    event_append(task_id=task.pk, item_id=item.pk, type=EventType.NEEDS_MIGRATION, payload={"reason": reason})
    return True


def item_fail_locked(task: Task, item: Item, *, kind: str, message: str) -> None:
    item.status = ItemStatus.FAILED
    item.lease_clear()
    item.finished_at = timezone.now()
    item.failure_kind = kind
    item.last_error = message[:4000]
    item.save()
    event_append(task_id=task.pk, item_id=item.pk, type=EventType.ITEM_FAILED,
                 payload={"kind": kind, "reason": message[:1000]})
    task.consecutive_failures += 1
    task.save(update_fields=["consecutive_failures", "updated_at"])
    if task.consecutive_failures >= task.failure_threshold and task.status in ACTIVE_TASK_STATUSES:
        task_suspend_locked(task, reason=f"{task.consecutive_failures} consecutive failures: {failure_label(kind)}")
    else:
        task_maybe_finish(task)


def steps_passed(run: ItemRun) -> list:
    """The effect steps the decision did not choose, from the checkpoint's cursor up to the step the item is on:
    recorded (skipped) with its next recovery point, so that its cursor points at the step it stopped on."""
    return steps_ahead(run.cursor, run.outputs, steps_of(rehearsal=run.item.task.rehearsal))[0]


def _record_passed(run: ItemRun) -> None:
    passed = steps_passed(run)
    if passed:
        record_steps(run, passed)


def item_hand_back(run: ItemRun, *, why: str, unsent=None) -> str:
    """This worker stops before its next call (its lease is in doubt, or
    what it calls made it wait too long): the item goes back to the queue as
    its next attempt, and the effect it was about to call (`unsent`,
    provably not sent) is `failed`, so that attempt retries it with the same
    key. Nothing is written if the lease is already gone (the sweep took the
    item over)."""
    try:
        with phase(run, task=True) as locked:
            if unsent is not None:
                effect_not_sent(effect_id=unsent.pk, claim_token=run.token, actor=worker_name(),
                                note=f"not sent: {why}")
            item_requeue(run, locked, why=why)
    except LeaseLost:
        pass
    log.warning("item %s handed back: %s; nothing more called or written", run.item.pk, why)
    return "handed back"


def item_requeue(run: ItemRun, locked: Locked, *, why: str) -> str:
    """Inside a phase holding the task: the item goes back to the queue as its next attempt, neither failed
    nor counted toward a suspension (`items_requeue`)."""
    _record_passed(run)
    items_requeue(locked.task, [locked.item], actor=worker_name(), why=f"handed back: {why}")
    return "handed back"


def item_stop(run: ItemRun, locked: Locked, *, status: str, event_type: str, reason: str) -> str:
    """Inside a phase (the task locked, or for an item done with no run of failures to end, held as it is:
    `phase(ends=True)`): the item leaves this worker as `status` -- waiting for a person, or done -- with
    its event. With the task locked, a success ends its run of failures and the
    task may finish here; without, nothing of the task's is written and its
    finish is looked for once the item's end has committed."""
    _record_passed(run)
    _item_leaves(run, status=status, last_error=reason[:4000],
                 **({"finished_at": timezone.now()} if status == ItemStatus.DONE else {}))
    event_append(task_id=run.item.task_id, item_id=run.item.pk, type=event_type,
                 payload={"status": status, "reason": reason} if reason else {})
    if locked.task is not None:
        task = locked.task
        if status == ItemStatus.DONE and task.consecutive_failures:
            task.consecutive_failures = 0  # a success ends the run of failures (the task row is written only then)
            task.save(update_fields=["consecutive_failures", "updated_at"])
        task_maybe_finish(task)
    else:
        task_id = run.item.task_id
        transaction.on_commit(lambda: task_finish_if_idle(task_id), robust=True)  # failed: the sweep finishes it
    return "done" if status == ItemStatus.DONE else "waiting"


def _item_leaves(run: ItemRun, **fields) -> None:
    """Inside a phase: the item leaves this worker's lease with `fields` (status and what goes with it)."""
    item = Item(pk=run.item.pk)
    item.lease_clear()
    Item.objects.filter(pk=run.item.pk).update(**{name: getattr(item, name) for name in Item.LEASE_FIELDS},
                                              updated_at=timezone.now(), **fields)


def item_fail(run: ItemRun, locked: Locked, *, kind: str, message: str) -> str:
    """Inside a phase holding the task: the item failed (`item_fail_locked`)."""
    _record_passed(run)
    item_fail_locked(locked.task, locked.item, kind=kind, message=message)
    return f"failed ({kind})"


def phase_fail(run: ItemRun, *, kind, message) -> str:
    with phase(run, task=True) as locked:
        return item_fail(run, locked, kind=kind, message=message)


def phase_wait(run: ItemRun, *, status, reason, event_type) -> str:
    with phase(run, task=True) as locked:
        return item_stop(run, locked, status=status, event_type=event_type, reason=reason)


def phase_done(run: ItemRun) -> str:
    """The item's end, done: the task held as it is, or locked when this success ends a run of failures."""
    try:
        with phase(run, ends=True) as locked:
            return item_stop(run, locked, status=ItemStatus.DONE, event_type=EventType.ITEM_DONE, reason="")
    except TaskToWrite:  # an item of the task failed: this success ends that run
        with phase(run, task=True) as locked:
            return item_stop(run, locked, status=ItemStatus.DONE, event_type=EventType.ITEM_DONE, reason="")


# A step's output up to this size (as JSON) is carried by its event; a bigger
# one is stored once as a blob and referenced (one INSERT more).
INLINE_OUTPUT_CHARS = 2000


def step_events(run: ItemRun, steps, tool_calls=(), *, tool_step: str = "", usage: dict | None = None,
                model: str = "") -> tuple[int, dict, list[Event]]:
    """The new (cursor, outputs) after `steps` and their events, one each (the
    tool calls, the model's `usage` and the `model` that served it belong to
    `tool_step`, by default the last step); a big output is stored as a blob
    first and referenced."""
    task_id, item_id = run.item.task_id, run.item.pk
    outputs, cursor = dict(run.outputs), run.cursor
    tool_step = tool_step or steps[-1][0]
    events, big = [], []
    for step, output in steps:
        outputs[step] = output
        cursor += 1
        for call in tool_calls if step == tool_step else ():
            events.append(Event(task_id=task_id, item_id=item_id, type=EventType.TOOL_CALL,
                                payload={"step": step, **call}))
        kind = EventType.STEP_SKIPPED if not_chosen(output) else EventType.STEP_DONE
        payload = {"step": step, "cursor": cursor}
        if usage and step == tool_step:
            payload["usage"] = usage
        if model and step == tool_step:
            payload["model"] = model
        if len(canonical_json(output)) <= INLINE_OUTPUT_CHARS:
            payload["output"] = output
        else:
            big.append((payload, output))
        events.append(Event(task_id=task_id, item_id=item_id, type=kind, payload=payload))
    if big:
        for (payload, _), ref in zip(big, blobs_put([output for _, output in big]), strict=True):
            payload["output_ref"] = ref
    return cursor, outputs, events


def record_steps(run: ItemRun, steps, tool_calls=(), *, tool_step: str = "", extra=(), usage=None,
                 model: str = "") -> None:
    """Inside a phase: persist step outputs and advance the cursor, one event
    each (`step_events`; `extra` events follow in the same INSERT). `run`
    moves on at once: a phase that raises ends this worker's run of the item
    (`run` is then dropped), so once the phase has committed `run.cursor` and
    `run.outputs` are what the database holds."""
    cursor, outputs, events = step_events(run, steps, tool_calls, tool_step=tool_step, usage=usage, model=model)
    events_append([*events, *extra])
    # No read first: the checkpoint is ours, and the cursor we know is the
    # condition (anything else moved it: stop).
    if not checkpoint_move(run.item.pk, cursor_from=run.cursor, cursor_to=cursor, outputs=outputs):
        raise LeaseLost(f"item {run.item.pk}: its checkpoint is not at cursor {run.cursor}")
    run.cursor, run.outputs = cursor, outputs


def stop_if_task_stopped(run: ItemRun, locked: Locked) -> str:
    """Inside a phase: if its task was paused, suspended or cancelled, hand the
    item back (queued for a resume, or skipped): "task stopped"; else ""."""
    if locked.status in ACTIVE_TASK_STATUSES:
        return ""
    cancelled = locked.status == TaskStatus.CANCELLED
    status = ItemStatus.SKIPPED if cancelled else ItemStatus.QUEUED
    _item_leaves(run, status=status, **({"last_error": "task cancelled", "finished_at": timezone.now()}
                                        if cancelled else {}))
    event_append(task_id=run.item.task_id, item_id=run.item.pk,
                 type=EventType.ITEM_SKIPPED if cancelled else EventType.ITEM_STOPPED,
                 payload={"status": status, "reason": f"task {locked.status}"})
    return "task stopped"


def phase_step_done(run: ItemRun, step: str, output, tool_calls=(), *, skipped=(), usage: dict | None = None,
                    model: str = "") -> str:
    """A step's recovery point: its output (after the unchosen steps before
    it, and before the `skipped` ones that follow it), the cursor advanced;
    a model step's event names the `model` that served it. If the task
    stopped (paused, suspended, cancelled), the item is handed back instead.
    A task with a budget counts what the step's calls cost on its row, locked
    first, and the item's reservation ends (`budget.task_spend_locked`);
    spending all of the budget suspends the task, and the item is handed back."""
    spends = bool(usage) and run.item.task.has_budget
    with phase(run, task=spends) as locked:
        record_steps(run, [*steps_passed(run), (step, output), *skipped], tool_calls, tool_step=step, usage=usage,
                     model=model)
        if spends:
            task_spend_locked(locked.task, run.item.pk, usage)
        return stop_if_task_stopped(run, locked)


def phase_reserve(run: ItemRun, bound: Bound) -> tuple[str, str]:
    """Before a model call of a task with a budget, the task locked, then the item: the call's `bound` reserved
    (`budget.budget_reserve_locked`: RESERVED, or WAIT for the calls in flight), or the item is handed back
    (STOP: the task reached its budget and is suspended; or the task no longer runs); with the task's status."""
    with phase(run, task=True) as locked:
        task = locked.task
        answer = budget_reserve_locked(task, locked.item, bound) if task.status in ACTIVE_TASK_STATUSES else STOP
        stop_if_task_stopped(run, locked)
        return answer, task.status
