"""Reads for the dashboard: one query per concern, no N+1."""

import logging
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Max
from django.utils import timezone

from ledger.models import Effect
from ticketagent.eventlog.usage import tasks_usage
from ticketagent.llm.base import Usage
from ticketagent.models import Event, EventType, Item, ItemStatus, Task, TaskStatus

log = logging.getLogger(__name__)

ITEM_ORDER = [s.value for s in ItemStatus]
ENDED = (ItemStatus.DONE, ItemStatus.SKIPPED, ItemStatus.FAILED)
WAITING = (ItemStatus.WAITING_REVIEW, ItemStatus.WAITING_APPROVAL)


# Throughput is measured over the items that ended in this window of running
# time: time the task spent suspended, paused or waiting for review does not
# count, and a rate from long ago does not pretend to be today's.
RATE_WINDOW_SECONDS = 300
HELD_LABEL = "held until resume"


@dataclass
class Progress:
    total: int
    counts: dict
    done: int  # ended: done, skipped, failed
    percent: int
    per_minute: float | None  # running: the recent rate; completed: the average over its run
    eta_seconds: int | None
    held: bool = False  # queued items will not run until a resume (the task is suspended or paused)
    overall: bool = False  # per_minute is the whole run's average (a finished task)

    @property
    def segments(self):
        """(status, count, width %, label): queued items of a stopped task are labelled as held."""
        for status in ITEM_ORDER:
            n = self.counts.get(status, 0)
            if n:
                label = HELD_LABEL if self.held and status == ItemStatus.QUEUED else ItemStatus(status).label
                yield status, n, 100.0 * n / self.total if self.total else 0, label


@dataclass(frozen=True)
class Recent:
    """Items ended since `since` (the later of the window's start and the moment the task last started running)."""

    ended: int
    since: object


def _progress(task: Task, counts: dict, last_finished, recent: Recent | None = None) -> Progress:
    """Items by state, throughput and an ETA while it runs (from the recent rate).
    A completed task brings its own counts (`_frozen`): those passed are ignored."""
    if _frozen(task):
        counts, last_finished = task.final_counts, task.finished_at
    total = sum(counts.values())
    done = sum(counts.get(s, 0) for s in ENDED)
    per_minute = eta = None
    overall = False
    running = task.status in (TaskStatus.RUNNING, TaskStatus.QUEUED)
    if running and recent and recent.ended:
        elapsed = max((timezone.now() - recent.since).total_seconds(), 1.0)
        per_minute = recent.ended / elapsed * 60
        remaining = total - done - sum(counts.get(s, 0) for s in WAITING)
        if remaining > 0 and recent.ended >= 2:
            eta = int(remaining / per_minute * 60)
    elif task.status == TaskStatus.COMPLETED and done and last_finished:
        elapsed = max((last_finished - (task.started_at or task.created_at)).total_seconds(), 1.0)
        per_minute, overall = done / elapsed * 60, True
    percent = int(100 * done / total) if total else 0
    held = task.status in (TaskStatus.SUSPENDED, TaskStatus.PAUSED)
    return Progress(total, counts, done, percent, per_minute, eta, held=held, overall=overall)


def _frozen(task: Task) -> bool:
    """A completed task's items never move again: its counts were kept when it completed."""
    return task.status == TaskStatus.COMPLETED and task.final_counts is not None


def recent_rates(tasks: list[Task]) -> dict[int, Recent]:
    """For running tasks: items ended in the rate window since each last started running. Two queries."""
    running = [t for t in tasks if t.status in (TaskStatus.RUNNING, TaskStatus.QUEUED)]
    if not running:
        return {}
    now = timezone.now()
    window = now - timezone.timedelta(seconds=RATE_WINDOW_SECONDS)
    # the moment each task last became running: its last RESUMED or TASK_STATUS event
    restarted = dict(Event.objects.filter(task__in=running, type__in=(EventType.RESUMED, EventType.TASK_STATUS))
                     .values_list("task_id").annotate(last=Max("timestamp")))
    since = {t.pk: max(d for d in (window, t.started_at, restarted.get(t.pk)) if d) for t in running}
    earliest = min(since.values())
    ended: dict[int, int] = {}
    for task_id, finished in Item.objects.filter(task__in=running, finished_at__gte=earliest).values_list(
            "task_id", "finished_at"):
        if finished >= since[task_id]:
            ended[task_id] = ended.get(task_id, 0) + 1
    return {pk: Recent(ended.get(pk, 0), since[pk]) for pk in since}


def task_progress(task: Task) -> Progress:
    if _frozen(task):
        return _progress(task, {}, None)
    counts = dict(Item.objects.filter(task=task).values_list("status").annotate(n=Count("*")))
    last = Item.objects.filter(task=task, finished_at__isnull=False).aggregate(last=Max("finished_at"))["last"]
    return _progress(task, counts, last, recent_rates([task]).get(task.pk))


def task_recent_events(task: Task, n: int = 100) -> list[Event]:
    """The task's last `n` events, newest first. Two steps: the ids from the
    (task, id) index alone, then those rows. Asked in one query, PostgreSQL
    walks the primary key backwards and filters by task, reading every newer
    task's events first (50 ms at 300k events; docs/benchmarks.md)."""
    ids = list(Event.objects.filter(task=task).order_by("-id").values_list("id", flat=True)[:n])
    return list(Event.objects.filter(id__in=ids).select_related("item").defer("item__body", "item__metadata")
                .order_by("-id"))


def task_last_event_id(task: Task) -> int:
    """The task's change cursor: every state change appends an event, so an
    unchanged last event id means an unchanged page (one index look-up)."""
    return Event.objects.filter(task=task).order_by("-id").values_list("id", flat=True).first() or 0


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
    last_finished = dict(Item.objects.filter(task__in=ids, finished_at__isnull=False).values_list("task_id")
                         .annotate(last=Max("finished_at")))
    recent = recent_rates([t for t in tasks if not _frozen(t)])
    usage = tasks_usage(t.pk for t in tasks)
    for task in tasks:
        task.progress = _progress(task, counts.get(task.pk, {}), last_finished.get(task.pk), recent.get(task.pk))
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

    from ticketagent.llm.governor import governor_for

    try:
        governor = governor_for(settings.OPENAI_BASE_URL, settings.OPENAI_MODEL)
        return governor.waiting_words() if governor.down_since() is not None else ""
    except RedisError:
        return ""
