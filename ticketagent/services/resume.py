"""Resume: the dry-run of what resuming would do, the resume itself, and a new task from unfinished items."""

from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import F

from ledger.models import Effect, EffectState
from ticketagent.eventlog.append import event_append
from ticketagent.llm.schemas import SCHEMA_VERSION
from ticketagent.models import Checkpoint, EventType, Item, ItemStatus, Task, TaskStatus
from ticketagent.plan import MODEL_STEPS, STEPS, SUPPORTED_PLAN_VERSIONS
from ticketagent.services import ServiceError
from ticketagent.services.items import items_requeue
from ticketagent.services.tasks import task_create, task_locked, task_maybe_finish
from ticketagent.upload.rows import TicketRow


@dataclass
class DryRunItem:
    item_id: int
    ticket_id: str
    status: str
    category: str  # recompute | retry | needs_confirmation | continue | done
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
        """Items resuming sends back to the queue (running items just go on)."""
        return sum(1 for i in self.items if i.category in ("recompute", "retry", "continue")
                   and i.status in RESUMABLE_ITEM_STATUSES)

    @property
    def running(self) -> int:
        return sum(1 for i in self.items if i.status == ItemStatus.RUNNING)

    @property
    def can_resume(self) -> bool:
        """A resume that would enqueue nothing and let nothing go on is not offered (nor counted)."""
        return not self.blocked_reason and (self.will_enqueue > 0 or self.running > 0)

    @property
    def waiting(self) -> dict[str, int]:
        """Items that wait for a person, by status label: what the operator acts on instead (Review)."""
        out: dict[str, int] = {}
        for i in self.items:
            if i.status in (ItemStatus.WAITING_REVIEW, ItemStatus.WAITING_APPROVAL):
                label = ItemStatus(i.status).label
                out[label] = out.get(label, 0) + 1
        return out

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
        totals[entry.category] += 1
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
        task = task_locked(task_id)
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


NOTHING_TO_RESUME = ("nothing to resume: no item can be sent back to the queue; what waits for a person "
                     "(approvals, unknown effects) is acted on on the Review page")


def _resume_locked(task: Task, plan: DryRun, actor: str) -> None:
    items = list(Item.objects.select_for_update(no_key=True).filter(task=task, status__in=RESUMABLE_ITEM_STATUSES))
    if not items and not task.items.filter(status=ItemStatus.RUNNING).exists():
        raise ServiceError(NOTHING_TO_RESUME)  # not counted: a resume of nothing is no resume
    Checkpoint.objects.filter(item__in=[i.pk for i in items]).update(retry_count=F("retry_count") + 1)
    task.status = TaskStatus.RUNNING
    task.status_reason = ""
    task.consecutive_failures = 0
    task.resume_count += 1
    task.finished_at = None
    task.save()
    event_append(task_id=task.pk, type=EventType.RESUMED, actor=actor, payload={
        "resume_count": task.resume_count, "enqueued": len(items), "dry_run": plan.totals,
        "items": [item.pk for item in items],
    })
    items_requeue(task, items, actor=actor, why="resumed")
    task_maybe_finish(task)


def task_clone_unfinished(*, task_id: int, user=None) -> Task:
    """A new task from the items that did not finish (the needs-migration way out)."""
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
