"""Rehearsals: the same file under another version, and going live with the reviewed plan.

A rehearsal's items end after the decision (the model steps and the rules
ran for real; nothing was sent). Going live creates a new task whose items
start at their effect steps from the rehearsal's persisted outputs --
decide, then execute: no second model call -- except an item whose ticket
changed since (its input hash differs), which recomputes and says why.
"""

from django.db import transaction

from ticketagent.eventlog.append import events_append
from ticketagent.models import ACTIVE_TASK_STATUSES, Checkpoint, Event, EventType, Item, ItemStatus, Task
from ticketagent.playbooks.models import PlaybookVersion
from ticketagent.services import ServiceError
from ticketagent.services.readiness import helpdesk_ready
from ticketagent.services.tasks import task_create
from ticketagent.services.upload import expected_rejected
from ticketagent.upload.rows import TicketRow


def item_row(item: Item) -> TicketRow:
    """An item as the row it was uploaded from (its expected labels too)."""
    return TicketRow(row=item.row, ticket_id=item.ticket_id, customer_email=item.customer_email, subject=item.subject,
                     body=item.body, customer_name=item.customer_name, priority=item.priority,
                     language=item.language, metadata=item.metadata, expected=item.expected)


def _rehearsal(task_id: int) -> Task:
    task = Task.objects.select_related("playbook_version__playbook").filter(pk=task_id).first()
    if task is None:
        raise ServiceError("no such task")
    if not task.rehearsal:
        raise ServiceError(f"task {task.pk} is not a rehearsal")
    return task


def rehearsal_rerun(*, task_id: int, version: PlaybookVersion, user=None) -> Task:
    """The rehearsal's tickets rehearsed again under another published version of its playbook ("compare
    with version N"); ServiceError if the version is not one, or lacks a category the file expects."""
    task = _rehearsal(task_id)
    if version.is_draft or version.playbook_id != task.playbook_version.playbook_id:
        raise ServiceError(f"compare with a published version of {task.playbook_version.playbook.name}")
    rows = [item_row(item) for item in task.items.order_by("row")]
    unknown = expected_rejected(rows, version)
    if unknown:
        raise ServiceError(f"{len(unknown)} ticket(s) expect a category {version.label} does not have, e.g. "
                           f"{unknown[0]}")
    return task_create(rows=rows, name=f"{task.name} on {version.label}"[:200], user=user,
                       filename=task.source_filename, allow_auto_close=task.allow_auto_close,
                       notify_channel=task.notify_channel, failure_threshold=task.failure_threshold,
                       source_task=task, playbook_version=version, rehearsal=True)


def task_go_live(*, task_id: int, exclude=(), rows=None, user=None, name: str = "",
                 allow_auto_close: bool | None = None, notify_channel: str | None = None) -> Task:
    """A live task from a rehearsal's reviewed decisions: its tickets but the `exclude`d item ids; `rows`,
    when given (the tickets as they are now, e.g. a fresh export), replace the rehearsal's by ticket id.
    An item rehearsed to the end whose ticket did not change starts at its effect steps with the rehearsed
    outputs; any other recomputes (PLAN_RECOMPUTED says why)."""
    task = _rehearsal(task_id)
    if task.status in ACTIVE_TASK_STATUSES:
        raise ServiceError("the rehearsal is still running: go live once it has ended and its decisions are read")
    items = list(task.items.select_related("checkpoint").order_by("row"))
    rehearsed = _kept_items(items, exclude)
    fresh = _fresh_rows(items, rehearsed, rows)
    helpdesk_ready(notify_channel=notify_channel or task.notify_channel)
    live_rows, carried, recomputed = [], {}, {}
    for item in rehearsed:
        row = fresh.get(item.ticket_id) or item_row(item)
        live_rows.append(row)
        plan = _reviewed_plan(item, row, task.playbook_version_id)
        if isinstance(plan, dict):
            carried[row.ticket_id] = plan
        else:
            recomputed[row.ticket_id] = (item.pk, plan)
    with transaction.atomic():
        live = task_create(
            rows=live_rows, name=name or f"{task.name} (live)", user=user, filename=task.source_filename,
            allow_auto_close=task.allow_auto_close if allow_auto_close is None else allow_auto_close,
            notify_channel=notify_channel or task.notify_channel, failure_threshold=task.failure_threshold,
            source_task=task, playbook_version=task.playbook_version, carried=carried)
        actor = user.get_username() if user else "system"
        items = dict(live.items.filter(ticket_id__in=list(recomputed)).values_list("ticket_id", "id"))
        events_append([Event(task_id=live.pk, item_id=items[ticket], type=EventType.PLAN_RECOMPUTED, actor=actor,
                             payload={"from_item": origin, "reason": why})
                       for ticket, (origin, why) in recomputed.items()])
    return live


def _kept_items(items: list[Item], exclude) -> list[Item]:
    """The rehearsal's items that go live: all but the `exclude`d ids (ServiceError: an id not of its items, or
    nothing left)."""
    if not all(str(pk).isdigit() for pk in exclude):
        raise ServiceError("exclude names items by their number")
    excluded = {int(pk) for pk in exclude}
    strangers = excluded - {item.pk for item in items}
    if strangers:
        raise ServiceError(f"item {min(strangers)} is not a ticket of this rehearsal")
    kept = [item for item in items if item.pk not in excluded]
    if not kept:
        raise ServiceError("every ticket of the rehearsal is excluded: nothing would go live")
    return kept


def _fresh_rows(items: list[Item], kept: list[Item], rows) -> dict:
    """The new file's rows by ticket id ({} when none is given); ServiceError when it is empty, lacks a ticket that
    goes live, or holds one the rehearsal did not decide."""
    if rows is None:
        return {}
    if not rows:
        raise ServiceError("the new file holds no ticket")
    fresh = {row.ticket_id: row for row in rows}
    missing = [item.ticket_id for item in kept if item.ticket_id not in fresh]
    if missing:
        raise ServiceError(f"the new file lacks {len(missing)} rehearsed ticket(s), e.g. {missing[0]}: exclude "
                           f"them or upload the whole file")
    unrehearsed = sorted(set(fresh) - {item.ticket_id for item in items})
    if unrehearsed:
        raise ServiceError(f"the new file holds {len(unrehearsed)} ticket(s) the rehearsal did not decide, e.g. "
                           f"{unrehearsed[0]}: rehearse them first")
    return fresh


def _reviewed_plan(item: Item, row: TicketRow, version_id: int):
    """The rehearsed checkpoint to carry (a dict), or why the item recomputes instead (a str)."""
    checkpoint: Checkpoint | None = getattr(item, "checkpoint", None)
    if item.status != ItemStatus.DONE or checkpoint is None or "decide" not in checkpoint.step_outputs:
        return f"its rehearsal did not reach a decision ({item.get_status_display()})"
    if checkpoint.playbook_version_id != version_id:
        return "it was rehearsed under another playbook version: its decision is made again"
    now = Item(ticket_id=row.ticket_id, customer_email=row.customer_email, customer_name=row.customer_name,
               subject=row.subject, body=row.body, priority=row.priority, language=row.language).input_hash()
    if now != checkpoint.input_hash or (row.metadata or {}) != (item.metadata or {}):
        return "the ticket changed since the rehearsal: its decision is made again"
    return {"from_item": item.pk, "plan_version": checkpoint.plan_version, "schema_version": checkpoint.schema_version,
            "cursor": checkpoint.cursor, "input_hash": checkpoint.input_hash,
            "step_outputs": checkpoint.step_outputs}
