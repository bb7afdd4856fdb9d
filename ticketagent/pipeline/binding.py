"""A task is bound to its helpdesk: the lease's check that this worker serves it, before anything is written.

Items of a bound task are routed to its helpdesk's queue (`jobs.queue_name`),
so a worker serving another helpdesk does not even take them; the lease
checks again, because a job taken from the shared queue (a task bound
after its job was sent, or a process that runs items outside
`manage.py worker`) may still meet another helpdesk's worker. Such an item
is handed back untouched to its task's queue (`item_reroute`); nothing is
called or written on any helpdesk. A task not bound yet (created before
tasks were bound, or while its helpdesk did not answer) is bound in the
lease to the helpdesk of the first worker that knows its own, with a
HELPDESK_BOUND event. A rehearsal sends nothing: any worker runs it.
"""

import logging

from django.db import transaction

from ticketagent.channels.identity import Helpdesk
from ticketagent.eventlog.append import event_append
from ticketagent.models import ACTIVE_TASK_STATUSES, EventType, Item, ItemStatus, Task
from ticketagent.services.items import items_requeue
from ticketagent.services.tasks import task_locked

log = logging.getLogger(__name__)

NOT_THIS_HELPDESK = "bound to another helpdesk"  # the start of a lease refusal's reason (`item_process` reroutes)


def helpdesk_refusal(task: Task, served: Helpdesk | None, *, why_unknown: str = "") -> str:
    """Why this worker may not take an item of `task` ("" if it may): the task is bound to a helpdesk this
    worker does not serve, or to one while this worker cannot tell which it serves."""
    if task.rehearsal or not task.helpdesk_id:
        return ""
    if served is None:
        return (f"{NOT_THIS_HELPDESK}: task {task.pk} is bound to {task.helpdesk_label}; this worker cannot tell "
                f"which helpdesk it serves ({why_unknown or 'it did not answer'})")
    if served.id != task.helpdesk_id:
        return (f"{NOT_THIS_HELPDESK}: task {task.pk} is bound to {task.helpdesk_label}; this worker serves "
                f"{served.label}")
    return ""


def lease_refusal(task: Task, item: Item, served: Helpdesk | None, *, why_unknown: str = "") -> str:
    """Inside the lease, before anything is written: why this worker may not take `item` ("" if it may). A
    queued item is handed back as it is (the reason starts with NOT_THIS_HELPDESK); a running one (whose
    take-over would be a write) or an ended one is not this worker's to touch."""
    refusal = helpdesk_refusal(task, served, why_unknown=why_unknown)
    if not refusal or item.status == ItemStatus.QUEUED:
        return refusal
    return f"item is {item.status}; {refusal}"


def needs_binding(task: Task, served: Helpdesk | None) -> bool:
    return not task.rehearsal and not task.helpdesk_id and served is not None


def task_bind_locked(task: Task, served: Helpdesk, *, actor: str) -> None:
    """Inside the lease's transaction holding the task locked: bind a task not bound yet to the helpdesk this
    worker serves, and say so."""
    task.helpdesk_id, task.helpdesk_kind, task.helpdesk_url = served.id, served.kind, served.url
    task.save(update_fields=["helpdesk_id", "helpdesk_kind", "helpdesk_url", "updated_at"])
    event_append(task_id=task.pk, type=EventType.HELPDESK_BOUND, actor=actor, payload={
        "helpdesk": served.label, "why": "the task was not bound to a helpdesk yet: bound on a worker's first "
                                         "contact, to the helpdesk that worker serves"})
    log.warning("task %s was not bound to a helpdesk: bound now to %s (this worker's)", task.pk, served.label)


def item_reroute(*, item_id: int, attempt: int, actor: str, why: str) -> bool:
    """An item this worker may not take (`helpdesk_refusal`): handed back to its task's queue as it is (its
    next attempt, which the task's window sends to the queue of the task's helpdesk), nothing else written.
    False when the item moved meanwhile."""
    with transaction.atomic():
        task = task_locked(Item.objects.filter(pk=item_id).values_list("task_id", flat=True).get())
        item = Item.objects.select_for_update(no_key=True).get(pk=item_id)
        if item.status != ItemStatus.QUEUED or item.attempt != attempt:
            return False
        items_requeue(task, [item], actor=actor, why=why)
    return True


def tasks_not_served(served: Helpdesk) -> list[str]:
    """For a worker's log at start: the active tasks bound to another helpdesk, of which it takes no items."""
    other = (Task.objects.filter(status__in=ACTIVE_TASK_STATUSES, rehearsal=False, helpdesk_id__isnull=False)
             .exclude(helpdesk_id=served.id).order_by("pk")[:50])
    return [f"takes no items of task {task.pk} ({task.name}): it is bound to {task.helpdesk_label}, "
            f"this worker serves {served.label}" for task in other]
