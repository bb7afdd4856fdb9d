"""The phases of an item: each one transaction that ends in a recovery point (checkpoint and event).

Phases that change the task too (an item done, failed or waiting) lock the
task row first, then the item (one lock order everywhere); a step's phase
locks only the item and reads the task's status, so a pause or cancel that
commits meanwhile is seen at the next step. An effect step's recovery point
is written in the gate's phase 2, with the effect's outcome.
"""

import json
import logging

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from ledger.gate import intent_record
from ledger.keys import Intent, canonical_json
from ledger.services import effect_not_sent
from ticketagent.eventlog.append import blobs_put, event_append, events_append
from ticketagent.llm.base import ModelError
from ticketagent.llm.schemas import SCHEMA_VERSION
from ticketagent.models import ACTIVE_TASK_STATUSES, Checkpoint, Event, EventType, Item, ItemStatus, Task, TaskStatus
from ticketagent.pipeline.lease import (
    ItemRun,
    LeaseLost,
    hold,
    item_take_over,
    lease_fence,
    lock_held,
    release,
    task_of_item_locked,
    worker_name,
)
from ticketagent.plan import PLAN_VERSION, SUPPORTED_PLAN_VERSIONS, not_chosen
from ticketagent.services.items import items_requeue
from ticketagent.services.tasks import task_maybe_finish
from ticketagent.window import refill_ctes, refill_sent, window_size

log = logging.getLogger(__name__)


def lease_acquire(item_id: int, attempt: int, token: str) -> tuple[str, Item | None, Checkpoint | None]:
    """Take the item's lease (on PostgreSQL's clock: `now` is the database's).
    The caller notes the monotonic time before calling: the lease is valid
    for LEASE_SECONDS from then (`lease.Lease`)."""
    window = window_size()  # (may ask Redis how many workers there are: not inside the transaction)
    with transaction.atomic():
        task = task_of_item_locked(item_id)  # looked up at each lease; the phases reuse it
        if task is None:
            return "item does not exist", None, None
        # the item (locked) and its checkpoint (read) in one statement
        item = (Item.objects.select_for_update(no_key=True, of=("self",)).select_related("checkpoint").order_by()
                .annotate(db_now=Now()).get(pk=item_id))
        item.task = task
        now = item.db_now
        if task.status not in ACTIVE_TASK_STATUSES:
            return f"task is {task.status}", None, None
        if item.attempt != attempt:
            return f"stale job: the item is on attempt {item.attempt}", None, None
        if item.status == ItemStatus.RUNNING:
            if item.lease_expires_at and item.lease_expires_at > now:
                return f"item is held by {item.lease_owner}", None, None
            item_take_over(item, actor=worker_name(), why="lease expired")
        elif item.status != ItemStatus.QUEUED:
            return f"item is {item.status}", None, None
        checkpoint = getattr(item, "checkpoint", None)
        fresh = checkpoint is None
        if fresh:
            # Only the lease holder creates an item's checkpoint, under the
            # item lock: no race, so no get_or_create (and its savepoint).
            # It is written with the lease, below.
            checkpoint = Checkpoint(item=item, task=task, plan_version=PLAN_VERSION, schema_version=SCHEMA_VERSION,
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
        item.lease_owner = worker_name()
        item.lease_expires_at = now + timezone.timedelta(seconds=settings.LEASE_SECONDS)
        item.status = ItemStatus.RUNNING
        if checkpoint.input_hash != item.input_hash():
            item_fail_locked(task, item, kind="input_changed",
                              message="the ticket changed since its checkpoint was written; not continued")
            return "input changed", None, None
        if task.status == TaskStatus.QUEUED:
            task.status = TaskStatus.RUNNING
            task.started_at = now
            task.save()
            event_append(task_id=task.pk, type=EventType.TASK_STATUS, payload={"status": task.status})
        started = Event(task_id=task.pk, item_id=item.pk, type=EventType.ITEM_STARTED, actor=item.lease_owner,
                        payload={"attempt": item.attempt, "cursor": checkpoint.cursor,
                                 "plan_version": checkpoint.plan_version,
                                 "schema_version": checkpoint.schema_version, "input_hash": checkpoint.input_hash})
        _lease_write(item, checkpoint if fresh else None, started, window)
        return "", item, checkpoint


_LEASE_FIELDS = ("lease_token", "lease_owner", "lease_expires_at", "status", "updated_at")


def _lease_write(item: Item, checkpoint: Checkpoint | None, started: Event, window: int) -> None:
    """Inside the lease's transaction, the item locked: take the lease, write
    the new `checkpoint` (if any) and `started`, and top the task's window of
    `window` jobs up (the item leaves it; the jobs go out after commit) --
    in one statement."""
    quote = connection.ops.quote_name
    item.updated_at = timezone.now()
    fields = [Item._meta.get_field(name) for name in _LEASE_FIELDS]
    ctes = [f"i AS (UPDATE {quote(Item._meta.db_table)} SET {', '.join(f'{quote(f.column)} = %s' for f in fields)} "
            f"WHERE id = %s RETURNING id)"]
    params = [*(f.get_db_prep_save(getattr(item, f.attname), connection) for f in fields), item.pk]
    columns, rows = _event_rows([started], item.updated_at)
    ctes.append(f"e AS (INSERT INTO {quote(Event._meta.db_table)} ({columns}) VALUES (%s, %s, %s, %s, %s, %s))")
    params += rows
    if checkpoint is not None:
        ckpt = [f for f in Checkpoint._meta.concrete_fields if not f.primary_key]
        ctes.append(f"c AS (INSERT INTO {quote(Checkpoint._meta.db_table)} ({', '.join(quote(f.column) for f in ckpt)})"
                    f" VALUES ({', '.join(['%s'] * len(ckpt))}) RETURNING id)")
        params += [f.get_db_prep_save(f.pre_save(checkpoint, True), connection) for f in ckpt]
    refill, refill_params = refill_ctes(item.task_id, window, leaving=item.pk)
    ctes.append(refill.strip())
    new_id = "(SELECT id FROM c)" if checkpoint is not None else "NULL"
    sql = (f"WITH {', '.join(ctes)} SELECT {new_id}, (SELECT count(*) FROM i), "
           f"(SELECT coalesce(json_agg(json_build_array(id, attempt)), '[]') FROM sent)")
    with connection.cursor() as db:
        db.execute(sql, [*params, *refill_params])
        checkpoint_id, leased, sent = db.fetchone()
    if leased != 1:
        raise LeaseLost(f"item {item.pk}: gone while its lease was taken")
    if checkpoint is not None:
        checkpoint.pk = checkpoint_id
        checkpoint._state.adding, checkpoint._state.db = False, connection.alias
    refill_sent([tuple(ref) for ref in (json.loads(sent) if isinstance(sent, str) else sent)])


def item_fail_locked(task: Task, item: Item, *, kind: str, message: str) -> None:
    release(item, ItemStatus.FAILED)
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
        task_maybe_finish(task)


def _record_pending(run: ItemRun) -> None:
    """Inside a phase holding the item: the steps the decision did not choose,
    passed since the last recovery point, are recorded before the item stops,
    so its cursor points at the step it stopped on."""
    if run.pending:
        run.cursor, run.outputs = record_steps(run, run.pending)
        run.pending = []


def item_hand_back(run: ItemRun, *, why: str, unsent=None) -> None:
    """This worker stops before its next call (its lease is in doubt): the
    item goes back to the queue as its next attempt, and the effect it was
    about to call (`unsent`, provably not sent) is `failed`, so that attempt
    retries it with the same key. Nothing is written if the lease is
    already gone (the sweep took the item over)."""
    try:
        with transaction.atomic():
            task, item = lock_held(run.item.pk, run.token)
            if unsent is not None:
                effect_not_sent(effect_id=unsent.pk, holder=run.token, actor=worker_name(),
                                note=f"not sent: {why}")
            _record_pending(run)
            items_requeue(task, [item], actor=worker_name(), why=f"handed back: {why}")
    except LeaseLost:
        pass
    log.warning("item %s handed back: %s; nothing more called or written", run.item.pk, why)


def phase_fail(run: ItemRun, *, kind, message):
    with transaction.atomic():
        task, item = lock_held(run.item.pk, run.token)
        _record_pending(run)
        item_fail_locked(task, item, kind=kind, message=message)


def phase_wait(run: ItemRun, *, status, reason, event_type):
    with transaction.atomic():
        task, item = lock_held(run.item.pk, run.token)
        _record_pending(run)
        release(item, status)
        item.last_error = reason[:4000]
        item.save()
        event_append(task_id=task.pk, item_id=item.pk, type=event_type, payload={"status": status, "reason": reason})
        task_maybe_finish(task)


def phase_done(run: ItemRun):
    with transaction.atomic():
        task, item = lock_held(run.item.pk, run.token)
        _record_pending(run)
        event_append(task_id=task.pk, item_id=item.pk, type=EventType.ITEM_DONE)
        item_done_locked(task, item)


def item_done_locked(task: Task, item: Item) -> None:
    """Inside a transaction holding task and item (`lock_held`): the item is
    done (its ITEM_DONE event written by the caller), the task's counters move."""
    release(item, ItemStatus.DONE)
    item.last_error = ""
    item.save()
    task.consecutive_failures = 0
    task.last_success_item = item
    task.save(update_fields=["consecutive_failures", "last_success_item", "updated_at"])
    task_maybe_finish(task)


def item_done_fenced(task: Task, item_id: int) -> None:
    """`item_done_locked` for a phase that locked the task (`task`) and then
    the item through its fenced checkpoint update: the item's and the task's
    rows updated as they are, not read first -- on PostgreSQL in one
    statement that also asks whether another item of the task is still to
    run (nearly always: then the task cannot finish yet)."""
    now = timezone.now()
    task.consecutive_failures, task.last_success_item_id = 0, item_id
    items, tasks = (connection.ops.quote_name(m._meta.db_table) for m in (Item, Task))
    sql = (f"WITH i AS (UPDATE {items} SET status = %s, lease_token = '', lease_owner = '', lease_expires_at = NULL, "
           f"finished_at = %s, last_error = '', updated_at = %s WHERE id = %s RETURNING id), "
           f"t AS (UPDATE {tasks} SET consecutive_failures = 0, last_success_item_id = %s, updated_at = %s "
           f"WHERE id = %s RETURNING id) "
           f"SELECT (SELECT count(*) FROM i) + (SELECT count(*) FROM t), EXISTS (SELECT 1 FROM {items} "
           f"WHERE task_id = %s AND status IN (%s, %s) AND id <> %s)")
    with connection.cursor() as db:
        db.execute(sql, [ItemStatus.DONE, now, now, item_id, item_id, now, task.pk,
                         task.pk, ItemStatus.QUEUED, ItemStatus.RUNNING, item_id])
        written, others = db.fetchone()
    if written != 2:
        raise LeaseLost(f"item {item_id}: its row or its task's is gone")
    if not others:  # the task's last item: finish it as any other end does
        task_maybe_finish(task)


# A step's output up to this size (as JSON) is carried by its event; a bigger
# one is stored once as a blob and referenced (one INSERT more).
INLINE_OUTPUT_CHARS = 2000


def step_events(run: ItemRun, steps, tool_calls=(), *, tool_step: str = "") -> tuple[int, dict, list[Event]]:
    """The new (cursor, outputs) after `steps` and their events, one each (the
    tool calls belong to `tool_step`, by default the last step); a big
    output is stored as a blob first and referenced."""
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
        if len(canonical_json(output)) <= INLINE_OUTPUT_CHARS:
            payload["output"] = output
        else:
            big.append((payload, output))
        events.append(Event(task_id=task_id, item_id=item_id, type=kind, payload=payload))
    if big:
        for (payload, _), ref in zip(big, blobs_put([output for _, output in big]), strict=True):
            payload["output_ref"] = ref
    return cursor, outputs, events


def record_steps(run: ItemRun, steps, tool_calls=(), *, tool_step: str = "", extra=(), fenced=False
                 ) -> tuple[int, dict]:
    """Inside a phase holding the item (or, `fenced`, a phase whose checkpoint
    update is its fence): persist step outputs and advance the cursor, one
    event each (`step_events`; `extra` events follow in the same INSERT).
    Returns the new (cursor, outputs)."""
    cursor, outputs, events = step_events(run, steps, tool_calls, tool_step=tool_step)
    if fenced:
        checkpoint_advance_fenced(run, cursor, outputs, [*events, *extra])
        return cursor, outputs
    events_append([*events, *extra])
    # No read first: the checkpoint is ours, and the cursor we know is the
    # condition (anything else moved it: stop).
    moved = Checkpoint.objects.filter(item_id=run.item.pk, cursor=run.cursor).update(
        cursor=cursor, step_outputs=outputs, updated_at=timezone.now())
    if moved != 1:
        raise LeaseLost(f"item {run.item.pk}: its checkpoint is not at cursor {run.cursor}")
    return cursor, outputs


def _checkpoint_update(run: ItemRun, cursor: int, outputs: dict, now, when: str, when_params) -> tuple[str, list]:
    """The UPDATE moving the checkpoint from the cursor we know to `cursor` if `when` (SQL) holds, without its
    RETURNING, and its parameters."""
    quote = connection.ops.quote_name
    prep = {f: Checkpoint._meta.get_field(f) for f in ("step_outputs", "updated_at")}
    sql = (f"UPDATE {quote(Checkpoint._meta.db_table)} SET cursor = %s, step_outputs = %s, updated_at = %s "
           f"WHERE item_id = %s AND cursor = %s AND {when}")
    return sql, [cursor, prep["step_outputs"].get_db_prep_save(outputs, connection),
                 prep["updated_at"].get_db_prep_save(now, connection), run.item.pk, run.cursor, *when_params]


def checkpoint_ctes(run: ItemRun, cursor: int, outputs: dict, events: list[Event], *, when: str, when_params=()
                    ) -> tuple[str, list]:
    """For a statement on PostgreSQL: `cp`, the checkpoint moved from the
    cursor we know to `cursor` if `when` (SQL) holds, and `ev`, `events`
    appended if it moved; as CTEs (comma-joined) and their parameters."""
    now = timezone.now()
    update, params = _checkpoint_update(run, cursor, outputs, now, when, when_params)
    sql = f"cp AS ({update} RETURNING 1)"
    if events:
        columns, rows = _event_rows(events, now)
        sql += (f", ev AS (INSERT INTO {connection.ops.quote_name(Event._meta.db_table)} ({columns}) "
                f"SELECT * FROM (VALUES {', '.join(['(%s, %s, %s, %s, %s, %s)'] * len(events))}) AS v "
                f"WHERE EXISTS (SELECT 1 FROM cp))")
        params += rows
    return sql, params


def checkpoint_advance_fenced(run: ItemRun, cursor: int, outputs: dict, events: list[Event]) -> None:
    """The fence, the checkpoint and the events in one statement on PostgreSQL
    (two elsewhere): move the checkpoint from the cursor we know, on the
    condition that this worker still holds the item's lease -- the item row
    locked (FOR NO KEY UPDATE, as `hold` does) -- append the events if it moved, and
    read the task's status (as `hold` does). Raises LeaseLost otherwise."""
    fence = lease_fence(run)
    status = f"SELECT status FROM {connection.ops.quote_name(Task._meta.db_table)} WHERE id = %s"
    ctes, params = checkpoint_ctes(run, cursor, outputs, events, when=fence.condition, when_params=fence.params)
    sql = f"WITH {ctes} SELECT ({status}) FROM cp"
    params = [*params, run.item.task_id]
    with connection.cursor() as db:
        db.execute(sql, params)
        row = db.fetchone()
    if row is None:
        raise LeaseLost(f"item {run.item.pk}: lease {run.token[:8]} was taken over, or its checkpoint is not at "
                        f"cursor {run.cursor}")
    run.task_status = row[0]


def _event_rows(events: list[Event], now) -> tuple[str, list]:
    """The columns and values of `events` for an INSERT … SELECT (the ids, and so the log's order, follow the list)."""
    quote = connection.ops.quote_name
    names = ("task_id", "item_id", "type", "payload", "actor", "timestamp")
    fields = [Event._meta.get_field(n) for n in names]
    values = []
    for event in events:
        event.timestamp = now
        values += [f.get_db_prep_save(getattr(event, f.attname), connection) for f in fields]
    return ", ".join(quote(f.column) for f in fields), values


def stop_if_task_stopped(run: ItemRun) -> bool:
    """Inside a phase holding the item: if its task was paused, suspended or
    cancelled, hand the item back (queued for a resume, or skipped)."""
    if run.task_status in ACTIVE_TASK_STATUSES:
        return False
    cancelled = run.task_status == TaskStatus.CANCELLED
    status = ItemStatus.SKIPPED if cancelled else ItemStatus.QUEUED
    now = timezone.now()
    Item.objects.filter(pk=run.item.pk).update(
        status=status, lease_token="", lease_owner="", lease_expires_at=None, updated_at=now,
        **({"last_error": "task cancelled", "finished_at": now} if cancelled else {}))
    event_append(task_id=run.item.task_id, item_id=run.item.pk,
                 type=EventType.ITEM_SKIPPED if cancelled else EventType.ITEM_STOPPED,
                 payload={"status": status, "reason": f"task {run.task_status}"})
    return True


def phase_step_done(run: ItemRun, step: str, output, tool_calls=(), *, skipped=(), chain: Intent | None = None
                    ) -> bool:
    """Persist a step's output (after the unchosen steps before it, and before
    the `skipped` ones that follow it) and advance the cursor. With `chain`,
    the next effect's intent commits in the same transaction (its fence is
    this phase's: the item is locked, the lease checked). False when the task
    stopped (paused, suspended, cancelled) and the item was handed back.

    Without `chain`, on PostgreSQL, the recovery point is one statement
    (`checkpoint_advance_fenced`) and commits by itself: no BEGIN and COMMIT
    round trips around it (a big output's blob, stored before it, is
    content-addressed: one the statement then does not refer to is harmless)."""
    steps = [*run.pending, (step, output), *skipped]
    if chain is None:
        cursor, outputs = record_steps(run, steps, tool_calls, tool_step=step, fenced=True)
        stopped = False
        if run.task_status not in ACTIVE_TASK_STATUSES:
            with transaction.atomic():  # hand the item back under its lock, as the phase would have
                run.cursor, run.outputs = cursor, outputs
                hold(run)
                stopped = stop_if_task_stopped(run)
    else:
        with transaction.atomic():
            cursor, outputs = record_steps(run, steps, tool_calls, tool_step=step, fenced=True)
            stopped = stop_if_task_stopped(run)
            if chain is not None and not stopped:
                run.chained = (chain, *intent_record(chain))
    run.cursor, run.outputs, run.pending = cursor, outputs, []
    return not stopped
