"""A task's life: created from rows, paused, cancelled, closed when no item can move.

Lock order, everywhere: the task row, then the item row, then its effects.
"""

from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from ticketagent.channels.identity import Helpdesk, IdentityUnknown
from ticketagent.channels.served import helpdesk_reached
from ticketagent.eventlog.append import event_append, events_append
from ticketagent.llm.clients import model_label
from ticketagent.llm.schemas import SCHEMA_VERSION
from ticketagent.models import ACTIVE_TASK_STATUSES, Event, EventType, Item, ItemStatus, Task, TaskStatus
from ticketagent.plan import PLAN_VERSION, steps_of
from ticketagent.playbooks.models import PlaybookVersion
from ticketagent.playbooks.services import version_default
from ticketagent.services import ServiceError
from ticketagent.services.budget import Budget, budget_priced
from ticketagent.services.item_rows import items_insert, plans_carry
from ticketagent.services.outcomes import done_nothing_sent
from ticketagent.signals import items_runnable, task_stopping


def task_create(*, rows, name: str, user=None, filename: str = "", allow_auto_close: bool = False,
                notify_channel: str = "helpdesk", failure_threshold: int | None = None,
                source_task: Task | None = None, origins: dict | None = None,
                playbook_version: PlaybookVersion | None = None, rehearsal: bool = False,
                carried: dict | None = None, budget: Budget | None = None) -> Task:
    """Create a task and its items in one transaction, pinned to a published playbook version (default:
    `version_default()`); its first window of jobs goes to Redis after commit. `carried` (ticket id ->
    checkpoint of a rehearsal's item) starts those items from the reviewed step outputs. With a `budget`
    (USD or tokens), reaching it suspends the task."""
    if not rows:
        raise ServiceError("a task needs at least one ticket")
    budget_priced(budget)
    helpdesk, unbound_why = _helpdesk_for(source_task)  # asked before the transaction: no call inside one
    with transaction.atomic():
        version = playbook_version or version_default()
        if version.is_draft:
            raise ServiceError(f"{version.label} is a draft: publish it before a task runs on it")
        task = Task.objects.create(
            name=name[:200] or filename[:200] or "batch", source_filename=filename[:255], created_by=user,
            allow_auto_close=allow_auto_close, notify_channel=notify_channel, model_label=model_label(),
            failure_threshold=failure_threshold or settings.SUSPEND_AFTER_FAILURES, source_task=source_task,
            playbook_version=version, rehearsal=rehearsal,
            budget_usd=budget.usd if budget else None, budget_tokens=budget.tokens if budget else None,
            helpdesk_id=helpdesk.id if helpdesk else None, helpdesk_kind=helpdesk.kind if helpdesk else "",
            helpdesk_url=helpdesk.url if helpdesk else "",
        )
        count = items_insert(task=task, rows=rows, origins=origins)
        if carried:
            plans_carry(task, carried, actor=user.get_username() if user else "system")
        actor = user.get_username() if user else "system"
        event_append(task_id=task.pk, type=EventType.TASK_CREATED, actor=actor, payload={
            "items": count, "filename": filename, "allow_auto_close": allow_auto_close,
            "notify_channel": notify_channel, "failure_threshold": task.failure_threshold,
            "model": task.model_label, "source_task": source_task.pk if source_task else None,
            "playbook_version": version.pk, "playbook": version.label, "rehearsal": rehearsal,
            "budget": budget.label if budget else None,
            "helpdesk": helpdesk.label if helpdesk else f"not bound: the helpdesk did not say who it is "
                                                        f"({unbound_why}); bound on a worker's first contact",
        })
        event_append(task_id=task.pk, type=EventType.PLANNED, actor=actor, payload={
            "plan_version": PLAN_VERSION, "schema_version": SCHEMA_VERSION, "playbook_version": version.pk,
            "steps": [s.name for s in steps_of(rehearsal=rehearsal)],
        })
        items_runnable.send(sender=Task, task_id=task.pk, front=True)  # a new task starts at the next free worker
    return task


def _helpdesk_for(source_task: Task | None) -> tuple[Helpdesk | None, str]:
    """The helpdesk a new task is bound to: its source task's (its items' effects went there), or the one the
    configured helpdesk says it is now; None (and why) when it does not answer: the task is created unbound and
    bound on a worker's first contact (docs/operator-guide.md)."""
    if source_task is not None and source_task.helpdesk_id:
        return Helpdesk(kind=source_task.helpdesk_kind, url=source_task.helpdesk_url, id=source_task.helpdesk_id), ""
    try:
        return helpdesk_reached(), ""
    except IdentityUnknown as exc:
        return None, str(exc)


def _withdrawn(task: Task) -> int:
    """Inside the transaction stopping `task`: scheduling takes its waiting jobs back; how many."""
    return sum(n or 0 for _, n in task_stopping.send(sender=Task, task_id=task.pk))


def task_locked(task_id: int) -> Task:
    return Task.objects.select_for_update(no_key=True).get(pk=task_id)


def task_maybe_finish(task: Task) -> None:
    """Inside a transaction holding the task lock: close the task when no item
    can move without a person (and a task that needs review once nothing waits)."""
    if task.status not in (*ACTIVE_TASK_STATUSES, TaskStatus.NEEDS_REVIEW):
        return
    # Runs at the end of every item: while items are still queued or running
    # (nearly always), stop at the first one instead of counting the task.
    if _items_to_run(task.pk):
        return
    counts = dict(task.items.values_list("status").annotate(n=Count("*")).values_list("status", "n"))
    if counts.get(ItemStatus.QUEUED) or counts.get(ItemStatus.RUNNING):
        return
    total = sum(counts.values())
    finished = counts.get(ItemStatus.DONE, 0) + counts.get(ItemStatus.SKIPPED, 0)
    status = TaskStatus.COMPLETED if finished == total else TaskStatus.NEEDS_REVIEW
    if status == task.status:
        return  # needs review still: nothing changed
    task.status = status
    task.final_counts = counts if task.status == TaskStatus.COMPLETED else None
    task.final_nothing_sent = (done_nothing_sent([task.pk]).get(task.pk, 0)
                               if task.status == TaskStatus.COMPLETED else None)
    task.finished_at = timezone.now()
    task.status_reason = "" if task.status == TaskStatus.COMPLETED else (
        f"{total - finished} item(s) wait for a person or failed")
    task.save()
    event_append(task_id=task.pk, type=EventType.TASK_STATUS, payload={"status": task.status, "counts": counts})


def _items_to_run(task_id: int) -> bool:
    return Item.objects.filter(task_id=task_id, status__in=(ItemStatus.QUEUED, ItemStatus.RUNNING)).exists()


def task_finish_if_idle(task_id: int) -> bool:
    """Outside a transaction, after an item of the task ended: finish the task if no item of it is left to run
    (one read; the task locked only then, and looked at again under its lock). True when it changed. The worker
    of a task's last item does this once its end has committed; the sweep, for a worker that died between."""
    if _items_to_run(task_id):
        return False
    with transaction.atomic():
        task = task_locked(task_id)
        before = task.status
        task_maybe_finish(task)
        return task.status != before


def task_suspend_locked(task: Task, *, reason: str, **payload) -> None:
    """Inside a transaction holding the task lock: suspend it with the reason, beside the last item done before
    it. Nothing more of it starts until a resume; a running item is handed back at its next step."""
    task.status = TaskStatus.SUSPENDED
    task.status_reason = reason
    # shown beside the suspension: derived now, not written by every item that succeeds
    task.last_success_item_id = (task.items.filter(status=ItemStatus.DONE).order_by("-finished_at", "-pk")
                                 .values_list("pk", flat=True).first())
    task.save()
    event_append(task_id=task.pk, type=EventType.SUSPENDED, payload={
        "reason": reason, "last_success_item": task.last_success_item_id, **payload})


def task_pause(*, task_id: int, actor: str) -> Task:
    with transaction.atomic():
        task = task_locked(task_id)
        if task.status not in ACTIVE_TASK_STATUSES:
            raise ServiceError(f"only a queued or running task can be paused; this one is {task.get_status_display()}")
        task.status = TaskStatus.PAUSED
        task.status_reason = f"paused by {actor}"
        task.save()
        withdrawn = _withdrawn(task)  # its waiting jobs leave Redis; resume sends the items again
        event_append(task_id=task.pk, type=EventType.PAUSED, actor=actor, payload={"withdrawn_jobs": withdrawn})
    return task


def task_cancel(*, task_id: int, actor: str) -> Task:
    with transaction.atomic():
        task = task_locked(task_id)
        if task.is_final:
            raise ServiceError(f"this task is already {task.get_status_display()}")
        task.status = TaskStatus.CANCELLED
        task.status_reason = f"cancelled by {actor}"
        task.finished_at = timezone.now()
        task.save()
        # Under the task's lock no worker can lease one of these meanwhile,
        # and a job popped before this commits finds the task cancelled.
        withdrawn = _withdrawn(task)
        skipped = list(task.items.filter(status=ItemStatus.QUEUED).values_list("pk", flat=True))
        task.items.filter(status=ItemStatus.QUEUED).update(
            status=ItemStatus.SKIPPED, last_error="task cancelled", finished_at=timezone.now())
        event_append(task_id=task.pk, type=EventType.CANCELLED, actor=actor, payload={"skipped_items": len(skipped),
                                                                                    "withdrawn_jobs": withdrawn})
        events_append([Event(task_id=task.pk, item_id=pk, type=EventType.ITEM_SKIPPED, actor=actor,
                             payload={"status": ItemStatus.SKIPPED, "reason": "task cancelled"}) for pk in skipped])
    return task
