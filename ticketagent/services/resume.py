"""Resume: the dry-run of what resuming would do, the resume itself, and a new task from unfinished items."""

from dataclasses import dataclass, field
from decimal import Decimal

from django.db import transaction
from django.db.models import Exists, F

from ledger.models import Effect, EffectState
from ticketagent.eventlog.append import event_append, events_append
from ticketagent.eventlog.usage import step_costs
from ticketagent.llm.prices import NANO
from ticketagent.llm.schemas import SCHEMA_VERSION
from ticketagent.models import Checkpoint, Event, EventType, Item, ItemStatus, Task, TaskStatus
from ticketagent.plan import MODEL_STEPS, SUPPORTED_PLAN_VERSIONS, held_for_approval, steps_of, steps_to_run
from ticketagent.playbooks.models import PlaybookVersion
from ticketagent.playbooks.services import version_latest_published
from ticketagent.services import ServiceError
from ticketagent.services.budget import Budget, budget_reached, budget_renew_locked
from ticketagent.services.items import items_requeue
from ticketagent.services.outcomes import outer_item_effects
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
    # a newer published version of the task's playbook, and how many unfinished items could move to it
    newer_version: PlaybookVersion | None = None
    movable: int = 0
    # the mean cost of each model step recorded so far, and of one call (None: no call has a known cost yet),
    # from how many calls
    step_cost: dict[str, Decimal] = field(default_factory=dict)
    call_cost: Decimal | None = None
    calls_known: int = 0
    budget_reached: bool = False  # the task reached its budget: resuming needs a new one

    @property
    def model_items(self) -> int:
        """Items resuming sends back to their model steps."""
        return self.totals["recompute"]

    @property
    def model_steps(self) -> list[str]:
        """The model steps resuming runs again, one entry per item and step."""
        return [step for i in self.items if i.category == "recompute" for step in i.steps]

    @property
    def projected_cost(self) -> Decimal | None:
        """What is left may cost: each model step still to run at the mean cost of that step so far, or of one
        call for a step not recorded yet (it makes one call at least); None: no call has a known cost yet."""
        steps = self.model_steps
        if not steps:
            return Decimal(0)
        if self.call_cost is None:
            return None
        return sum((self.step_cost.get(step, self.call_cost) for step in steps), Decimal(0)).quantize(NANO)

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


def task_has_work_to_resume(task: Task) -> bool:
    """Whether a resume would do anything: an item it sends back to the queue, or one that still runs (one
    query; the dry-run's `can_resume` says the same item by item)."""
    return task.items.filter(status__in=(*RESUMABLE_ITEM_STATUSES, ItemStatus.RUNNING)).exists()


def _incompatible_checkpoints(task: Task) -> int:
    return Checkpoint.objects.filter(task=task).exclude(
        schema_version=SCHEMA_VERSION, plan_version__in=SUPPORTED_PLAN_VERSIONS).count()


def task_dry_run(*, task_id: int) -> DryRun:
    """What resuming would do, item by item, before anything runs."""
    task = Task.objects.get(pk=task_id)
    # Plain tuples, three queries: model instances cost ~10x more per row, and
    # `task.items.only(...)` without `task_id` reloaded every item one by one
    # (Django fetches the deferred FK to attach the known task): 10k queries
    # for a 10k-item task. See docs/benchmarks.md, "Profiling".
    effects_by_item: dict[str, list[tuple[str, str]]] = {}
    for owner_item, owner_step, state in Effect.objects.filter(owner_task=str(task.pk)).order_by().values_list(
            "owner_item", "owner_step", "state"):
        effects_by_item.setdefault(owner_item, []).append((owner_step, state))
    # the cursor and the decision only (not the drafts): the steps each item will run, what it holds
    cursors, decisions = {}, {}
    for item_id, cursor, decide in Checkpoint.objects.filter(task=task).order_by().values_list(
            "item_id", "cursor", "step_outputs__decide"):
        cursors[item_id], decisions[item_id] = cursor, decide
    out: list[DryRunItem] = []
    totals = {"recompute": 0, "retry": 0, "needs_confirmation": 0, "continue": 0, "done": 0}
    for pk, ticket_id, status in Item.objects.filter(task=task).order_by("row").values_list(
            "id", "ticket_id", "status"):
        entry = _dry_run_entry(task, pk, ticket_id, status, effects_by_item.get(str(pk), ()), cursors.get(pk, 0),
                               decisions.get(pk) or {})
        totals[entry.category] += 1
        out.append(entry)
    blocked = _resume_blocked(task)
    newer = _newer_version(task)
    costs = step_costs(task.pk)
    calls = sum(c for _, c, _ in costs.values())
    return DryRun(task_id=task.pk, items=out, totals=totals, blocked_reason=blocked, newer_version=newer,
                  movable=_movable(task, newer).count() if newer else 0,
                  step_cost={name: (cost / n).quantize(NANO) for name, (n, _, cost) in costs.items()},
                  call_cost=(sum(c for _, _, c in costs.values()) / calls).quantize(NANO) if calls else None,
                  calls_known=calls, budget_reached=budget_reached(task))


OPEN_STATES = (EffectState.UNKNOWN, EffectState.INTENT)


def _dry_run_entry(task: Task, pk: int, ticket_id: str, status: str, effects, cursor: int, decide: dict) \
        -> DryRunItem:
    """What resuming does with one item: its effects (step, state), its checkpoint's cursor and decision."""
    if status in (ItemStatus.DONE, ItemStatus.SKIPPED):
        return DryRunItem(pk, ticket_id, status, "done")
    if status == ItemStatus.WAITING_APPROVAL:
        held = held_for_approval(decide, allow_auto_close=task.allow_auto_close)
        return DryRunItem(pk, ticket_id, status, "needs_confirmation", list(held), "waits for an operator's approval")
    if status == ItemStatus.WAITING_REVIEW or any(state in OPEN_STATES for _, state in effects):
        steps = [step for step, state in effects if state in OPEN_STATES]
        return DryRunItem(pk, ticket_id, status, "needs_confirmation", steps,
                          "unknown effects: resume will not touch them")
    if status == ItemStatus.RUNNING:
        return DryRunItem(pk, ticket_id, status, "continue", [], "running now")
    steps_here = steps_of(rehearsal=task.rehearsal)
    redo = [s.name for s in steps_here[cursor:] if s.name in MODEL_STEPS]
    retry = [step for step, state in effects if state == EffectState.FAILED]
    if retry:
        return DryRunItem(pk, ticket_id, status, "retry", retry,
                          "effects that did not happen are tried again with the same key")
    if redo:
        return DryRunItem(pk, ticket_id, status, "recompute", redo)
    return DryRunItem(pk, ticket_id, status, "continue", steps_to_run({"decide": decide} if decide else {},
                                                                        steps_here, cursor))


def _resume_blocked(task: Task) -> str:
    """Why the task cannot be resumed ("": it can)."""
    if _incompatible_checkpoints(task):
        return ("checkpoints were written by a plan or schema version this code cannot honour; "
                "start a new task from the unfinished items")
    if task.status in (TaskStatus.CANCELLED, TaskStatus.NEEDS_MIGRATION):
        return f"a {task.get_status_display()} task cannot be resumed"
    return ""


def _newer_version(task: Task) -> PlaybookVersion | None:
    """The latest published version of the task's playbook, if it is newer than the one the task pins."""
    pinned = task.playbook_version
    latest = version_latest_published(pinned.playbook)
    return latest if latest is not None and latest.number > pinned.number else None


MOVABLE_STATUSES = (ItemStatus.QUEUED, ItemStatus.FAILED, ItemStatus.WAITING_APPROVAL)


def _movable(task: Task, version: PlaybookVersion):
    """The unfinished items that may move to `version` (a query): not running, not on it already, and with
    no effect that happened or may have (only failed or skipped ones, which nobody received)."""
    acted = outer_item_effects().exclude(state__in=(EffectState.FAILED, EffectState.SKIPPED))
    return task.items.filter(status__in=MOVABLE_STATUSES).exclude(playbook_version=version).exclude(Exists(acted))


def task_move_version(*, task_id: int, version_id: int, actor: str) -> int:
    """Move the task's movable items (`_movable`) to a newer published version of its playbook: their
    checkpoints start again, so their model steps recompute under it; an item waiting for approval goes
    back to the queue. ITEM_MOVED each. Items with effects stay on their version. Returns how many moved."""
    with transaction.atomic():
        task = task_locked(task_id)
        version = PlaybookVersion.objects.filter(pk=version_id).first()
        if version is None or version.is_draft or version.playbook_id != task.playbook_version.playbook_id:
            raise ServiceError("move to a published version of the task's own playbook")
        if task.status in (TaskStatus.COMPLETED, TaskStatus.CANCELLED):
            raise ServiceError(f"a {task.get_status_display()} task has nothing to move")
        items = list(_movable(task, version).select_for_update(no_key=True).order_by("row"))
        if not items:
            raise ServiceError(f"no unfinished item without effects is left to move to {version.label}")
        Checkpoint.objects.filter(item__in=items).delete()
        waiting = [item for item in items if item.status == ItemStatus.WAITING_APPROVAL]
        events_append([Event(task_id=task.pk, item_id=item.pk, type=EventType.ITEM_MOVED, actor=actor, payload={
            "from_version": item.playbook_version_id, "to_version": version.pk, "to": version.label})
            for item in items])
        Item.objects.filter(pk__in=[item.pk for item in items]).update(playbook_version=version, approval="",
                                                                       approval_by="", approval_reason="")
        if waiting:
            items_requeue(task, waiting, actor=actor, why=f"moved to {version.label}: decided again")
    return len(items)


def task_resume(*, task_id: int, actor: str, budget: Budget | None = None) -> DryRun:
    """Re-enqueue what can continue; record RESUMED with who and when. A task that reached its budget needs a
    new `budget`, above what it spent (`budget_renew_locked`)."""
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
            budget_renew_locked(task, budget)
            _resume_locked(task, plan, actor, budget)
    if migrate:
        raise ServiceError(plan.blocked_reason)
    return plan


NOTHING_TO_RESUME = ("nothing to resume: no item can be sent back to the queue; what waits for a person "
                     "(approvals, unknown effects) is acted on on the Review page")


def _resume_locked(task: Task, plan: DryRun, actor: str, budget: Budget | None = None) -> None:
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
        "items": [item.pk for item in items], **({"budget": budget.label} if budget else {}),
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
