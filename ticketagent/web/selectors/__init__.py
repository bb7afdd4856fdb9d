"""Reads for the dashboard: one query per concern, no N+1."""

import logging
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Min
from django.utils import timezone

from ledger.models import Effect
from ticketagent.eventlog.usage import tasks_usage
from ticketagent.llm.base import Usage
from ticketagent.models import FINAL_TASK_STATUSES, Event, EventType, Item, ItemStatus, Task, TaskStatus
from ticketagent.outages import model_outages
from ticketagent.services.outcomes import done_nothing_sent
from ticketagent.web.pace import Pace, ended_pace, live_pace, recent_spans, running_spans

log = logging.getLogger(__name__)

ITEM_ORDER = [s.value for s in ItemStatus]
ENDED = (ItemStatus.DONE, ItemStatus.SKIPPED, ItemStatus.FAILED)
WAITING = (ItemStatus.WAITING_REVIEW, ItemStatus.WAITING_APPROVAL)


HELD_LABEL = "held until resume"
# the events that change a task's status, and the status each says (TASK_STATUS carries its own)
STATUS_EVENTS = {EventType.SUSPENDED: TaskStatus.SUSPENDED, EventType.PAUSED: TaskStatus.PAUSED,
                 EventType.RESUMED: TaskStatus.RUNNING, EventType.CANCELLED: TaskStatus.CANCELLED,
                 EventType.NEEDS_MIGRATION: TaskStatus.NEEDS_MIGRATION, EventType.TASK_STATUS: None}


@dataclass
class Progress:
    total: int
    counts: dict
    done: int  # ended: done, skipped, failed
    percent: int
    pace: Pace  # items per minute and an ETA range, from running time only (web/pace.py)
    held: bool = False  # queued items will not run until a resume (the task is suspended or paused)
    needs_review: bool = False  # its failed items wait on Review

    @property
    def per_minute(self) -> float | None:
        return self.pace.per_minute

    @property
    def overall(self) -> bool:
        return self.pace.overall

    @property
    def eta(self) -> tuple[int, int] | None:
        return self.pace.eta

    @property
    def segments(self):
        """(status, count, width %, label): queued items of a stopped task are labelled as held, and its failed
        ones as what a resume retries; a task that needs review has its failed items to review (as Review's)."""
        for status in ITEM_ORDER:
            n = self.counts.get(status, 0)
            if n:
                label = ItemStatus(status).label
                if self.held and status == ItemStatus.QUEUED:
                    label = HELD_LABEL
                elif status == ItemStatus.FAILED and self.held:
                    label = "failed, retried on resume"
                elif status == ItemStatus.FAILED and self.needs_review:
                    label = "failed, to review"
                yield status, n, 100.0 * n / self.total if self.total else 0, label


def _progress(task: Task, counts: dict, pace: Pace) -> Progress:
    """Items by state, with the task's pace. A completed task brings its own counts (`_frozen`)."""
    if _frozen(task):
        counts = task.final_counts
    total = sum(counts.values())
    done = sum(counts.get(s, 0) for s in ENDED)
    percent = int(100 * done / total) if total else 0
    held = task.status in (TaskStatus.SUSPENDED, TaskStatus.PAUSED)
    return Progress(total, counts, done, percent, pace, held=held, needs_review=task.status == TaskStatus.NEEDS_REVIEW)


def _frozen(task: Task) -> bool:
    """A completed task's items never move again: its counts were kept when it completed."""
    return task.status == TaskStatus.COMPLETED and task.final_counts is not None


def task_paces(tasks: list[Task], counts: dict[int, dict], now=None) -> dict[int, Pace]:
    """Each task's pace from its recorded timeline: its status changes (one query), the model API's outages
    (one) and, for tasks under way, the end times of its items in its recent running time (one more)."""
    changes = _status_changes(tasks)
    now = now or timezone.now()
    starts = [t.started_at or t.created_at for t in tasks]
    outages = model_outages(min(starts)) if starts else []
    under_way = [t for t in tasks if t.status not in FINAL_TASK_STATUSES and t.started_at]
    since = {t.pk: _window_start(t, changes.get(t.pk, []), now, outages) for t in under_way}
    finished = _ended_since(since)
    paces = {}
    for task in tasks:
        started = task.started_at or task.created_at
        if task.status in FINAL_TASK_STATUSES:
            c = task.final_counts if _frozen(task) else counts.get(task.pk, {})
            paces[task.pk] = ended_pace(started=started, changes=changes.get(task.pk, []),
                                        ended_items=sum(c.get(s, 0) for s in ENDED), finished=task.finished_at,
                                        outages=outages)
        elif task.pk in since:
            c = counts.get(task.pk, {})
            remaining = sum(c.values()) - sum(c.get(s, 0) for s in (*ENDED, *WAITING))
            paces[task.pk] = live_pace(started=started, changes=changes.get(task.pk, []),
                                       finished=finished.get(task.pk, []), remaining=remaining, now=now,
                                       outages=outages)
        else:
            paces[task.pk] = Pace(None, None)
    return paces


def _status_changes(tasks: list[Task]) -> dict[int, list]:
    """Per task, its status changes (time, status) in the order they were recorded (one query)."""
    changes: dict[int, list] = {}
    for task_id, kind, status, at in Event.objects.filter(task__in=[t.pk for t in tasks], type__in=STATUS_EVENTS) \
            .values_list("task_id", "type", "payload__status", "timestamp").order_by("id"):
        changes.setdefault(task_id, []).append((at, STATUS_EVENTS[kind] or status or ""))
    return changes


def _ended_since(since: dict) -> dict[int, list]:
    """Per task (id -> where its recent window begins), the end times of its items since then (one query)."""
    finished: dict[int, list] = {}
    if since:
        for task_id, at in Item.objects.filter(task__in=since, finished_at__gte=min(since.values())).values_list(
                "task_id", "finished_at"):
            finished.setdefault(task_id, []).append(at)
    return finished


def _window_start(task: Task, changes: list, now, outages):
    """Where the task's recent running window begins on the wall clock (its items that ended since are read)."""
    recent = recent_spans(running_spans(task.started_at, sorted(changes, key=lambda c: c[0]), now, outages))
    return recent[0][0] if recent else now


def tasks_nothing_sent(tasks: list[Task]) -> dict[int, int]:
    """Per task, its done items with no committed effect: kept on a completed task (`final_nothing_sent`), counted
    for the others (one query)."""
    counted = done_nothing_sent([t.pk for t in tasks if t.final_nothing_sent is None])
    return {t.pk: counted.get(t.pk, 0) if t.final_nothing_sent is None else t.final_nothing_sent for t in tasks}


def task_models(task: Task) -> list[tuple[str, int]]:
    """The models that served the task's model steps, each with how many steps (a task may outlive a restart on
    another model), most steps first and, on a tie, the one that served first; empty before any step."""
    served = (Event.objects.filter(task=task, type=EventType.STEP_DONE, payload__has_key="model")
              .values_list("payload__model").annotate(n=Count("id"), first=Min("id")).order_by("-n", "first"))
    return [(model, n) for model, n, _ in served]


def task_progress(task: Task, now=None) -> Progress:
    counts = {} if _frozen(task) else dict(
        Item.objects.filter(task=task).values_list("status").annotate(n=Count("*")))
    return _progress(task, counts, task_paces([task], {task.pk: counts}, now)[task.pk])


def task_recent_events(task: Task, n: int = 100) -> list[Event]:
    """The task's last `n` events, newest first. Two steps: the ids from the
    (task, id) index alone, then those rows. Asked in one query, PostgreSQL
    walks the primary key backwards and filters by task, reading every newer
    task's events first (50 ms at 300k events; docs/benchmarks.md, "Profiling")."""
    ids = list(Event.objects.filter(task=task).order_by("-id").values_list("id", flat=True)[:n])
    return list(Event.objects.filter(id__in=ids).select_related("item").defer("item__body", "item__metadata")
                .order_by("-id"))


FILTERS = {
    "running": (TaskStatus.QUEUED, TaskStatus.RUNNING),
    "suspended": (TaskStatus.SUSPENDED, TaskStatus.PAUSED, TaskStatus.NEEDS_MIGRATION),
    "needs_review": (TaskStatus.NEEDS_REVIEW,),
    "done": (TaskStatus.COMPLETED, TaskStatus.CANCELLED),
}


def tasks_for_dashboard(*, status_filter: str = "", limit: int = 50) -> list[Task]:
    """Tasks, suspended ones first (they wait for a person), each with its
    `progress` (items by state, items per minute, ETA) and its model calls'
    `usage` (tokens, cost). At most seven queries; completed tasks' items
    are not counted again (`Task.final_counts`)."""
    qs = Task.objects.all()
    if status_filter in FILTERS:
        qs = qs.filter(status__in=FILTERS[status_filter])
    suspended = list(qs.filter(status=TaskStatus.SUSPENDED).order_by("-id")[:limit])
    rest = list(qs.exclude(status=TaskStatus.SUSPENDED).order_by("-id")[: max(limit - len(suspended), 0)])
    tasks = suspended + rest
    ids = [t.pk for t in tasks if not _frozen(t)]  # completed tasks bring their counts along
    counts: dict[int, dict] = {}
    for task_id, status, n in Item.objects.filter(task__in=ids).values_list("task_id", "status").annotate(
            n=Count("*")):
        counts.setdefault(task_id, {})[status] = n
    paces = task_paces(tasks, counts)
    usage = tasks_usage(t.pk for t in tasks)
    nothing = tasks_nothing_sent(tasks)
    for task in tasks:
        task.progress = _progress(task, counts.get(task.pk, {}), paces[task.pk])
        task.nothing_sent = nothing[task.pk]
        task.with_effects = task.progress.counts.get(ItemStatus.DONE, 0) - task.nothing_sent
        task.usage = usage.get(task.pk) or Usage(cost_usd=Decimal(0))
        task.percent = task.progress.percent
    return tasks


def _int_or_none(value: str):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def effects_with_owners(effects) -> list[Effect]:
    """Attach the ticket and task an effect belongs to (`owner`), in one query.

    The ledger only knows opaque owner strings; the dashboard shows tickets."""
    effects = list(effects)
    ids = {i for i in (_int_or_none(e.owner_item) for e in effects) if i is not None}
    items = {i.pk: i for i in Item.objects.filter(pk__in=ids).select_related("task").only(
        "id", "ticket_id", "subject", "status", "task__id", "task__name", "task__status")}
    now = timezone.now()
    for effect in effects:
        effect.owner = items.get(_int_or_none(effect.owner_item))
        effect.age_seconds = (now - effect.intent_at).total_seconds() if effect.intent_at else 0.0
    return effects


def items_started(items) -> dict[int, int]:
    """Per item, the attempts that started (its ITEM_STARTED events): a hand-back or a requeue before a worker took
    the item raises its attempt number but starts nothing."""
    return dict(Event.objects.filter(item__in=[i.pk for i in items], type=EventType.ITEM_STARTED)
                .values_list("item_id").annotate(n=Count("id")))


def items_page_effects(items) -> dict[int, list[Effect]]:
    by_item: dict[int, list[Effect]] = {}
    for effect in Effect.objects.filter(owner_item__in=[str(i.pk) for i in items]).order_by("id"):
        by_item.setdefault(int(effect.owner_item), []).append(effect)
    return by_item


def model_api_wait() -> str:
    """"waiting for the model API since …" while the configured endpoint is down, else "" (the offline model
    never waits; a Redis that does not answer says nothing)."""
    if not settings.OPENAI_API_KEY:
        return ""
    from redis import RedisError

    from ticketagent.governor import governor_for

    try:
        governor = governor_for(settings.OPENAI_BASE_URL, settings.OPENAI_MODEL)
        return governor.waiting_words() if governor.down_since() is not None else ""
    except RedisError:
        return ""


def channel_waits() -> list[str]:
    """"waiting for the helpdesk since …" (and for the mail server) while the channel's system is down."""
    from ticketagent.channels.waiting import channel_waits as waits

    return waits()
