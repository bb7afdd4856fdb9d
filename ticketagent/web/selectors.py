"""Reads for the dashboard: one query per concern, no N+1."""

import logging
from dataclasses import dataclass

from django.core.paginator import Paginator
from django.db.models import Count, Max
from django.utils import timezone

from ledger.models import Effect, EffectState
from ticketagent.models import Event, Item, ItemStatus, Task, TaskStatus

log = logging.getLogger(__name__)

ITEM_ORDER = [s.value for s in ItemStatus]
ENDED = (ItemStatus.DONE, ItemStatus.SKIPPED, ItemStatus.FAILED)
WAITING = (ItemStatus.WAITING_REVIEW, ItemStatus.WAITING_APPROVAL)


@dataclass
class Progress:
    total: int
    counts: dict
    done: int  # ended: done, skipped, failed
    percent: int
    per_minute: float | None
    eta_seconds: int | None

    @property
    def segments(self):
        for status in ITEM_ORDER:
            n = self.counts.get(status, 0)
            if n:
                yield status, n, 100.0 * n / self.total if self.total else 0


def _progress(task: Task, counts: dict, last_finished) -> Progress:
    """Items by state, throughput since the task started, and an ETA while it runs.
    A completed task brings its own counts (`_frozen`): those passed are ignored."""
    if _frozen(task):
        counts, last_finished = task.final_counts, task.finished_at
    total = sum(counts.values())
    done = sum(counts.get(s, 0) for s in ENDED)
    per_minute = eta = None
    started = task.started_at or task.created_at
    if done and last_finished:
        elapsed = max((last_finished - started).total_seconds(), 1.0)
        per_minute = done / elapsed * 60
        remaining = total - done - sum(counts.get(s, 0) for s in WAITING)
        if task.status in (TaskStatus.RUNNING, TaskStatus.QUEUED) and remaining > 0 and per_minute > 0:
            eta = int(remaining / per_minute * 60)
    percent = int(100 * done / total) if total else 0
    return Progress(total, counts, done, percent, per_minute, eta)


def _frozen(task: Task) -> bool:
    """A completed task's items never move again: its counts were kept when it completed."""
    return task.status == TaskStatus.COMPLETED and task.final_counts is not None


def task_progress(task: Task) -> Progress:
    if _frozen(task):
        return _progress(task, {}, None)
    counts = dict(Item.objects.filter(task=task).values_list("status").annotate(n=Count("*")))
    last = Item.objects.filter(task=task, finished_at__isnull=False).aggregate(last=Max("finished_at"))["last"]
    return _progress(task, counts, last)


def task_recent_events(task: Task, n: int = 100) -> list[Event]:
    """The task's last `n` events, newest first. Two steps: the ids from the
    (task, id) index alone, then those rows. Asked in one query, PostgreSQL
    walks the primary key backwards and filters by task, reading every newer
    task's events first (50 ms at 300k events; docs/benchmarks.md)."""
    ids = list(Event.objects.filter(task=task).order_by("-id").values_list("id", flat=True)[:n])
    return list(Event.objects.filter(id__in=ids).order_by("-id"))


FILTERS = {
    "running": (TaskStatus.QUEUED, TaskStatus.RUNNING),
    "suspended": (TaskStatus.SUSPENDED, TaskStatus.PAUSED, TaskStatus.NEEDS_MIGRATION),
    "needs_review": (TaskStatus.NEEDS_REVIEW,),
    "done": (TaskStatus.COMPLETED, TaskStatus.CANCELLED),
}


def tasks_for_dashboard(*, status_filter: str = "", limit: int = 50) -> list[Task]:
    """Tasks, suspended ones first (they wait for a person), each with its
    `progress` (items by state, items per minute, ETA). At most four queries;
    completed tasks' items are not counted again (`Task.final_counts`)."""
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
    for task in tasks:
        task.progress = _progress(task, counts.get(task.pk, {}), last_finished.get(task.pk))
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


REVIEW_PAGE_SIZE = 50


def review_queue(*, unknown_page=1, approvals_page=1):
    """Unknown effects, oldest first, and the items waiting for an approval:
    a page of each (the counts are for the whole queue)."""
    unknown = Paginator(Effect.objects.filter(state=EffectState.UNKNOWN).order_by("intent_at", "id"),
                        REVIEW_PAGE_SIZE).get_page(unknown_page)
    unknown.object_list = effects_with_owners(unknown.object_list)
    approvals = Paginator(Item.objects.filter(status=ItemStatus.WAITING_APPROVAL).select_related("task")
                          .order_by("updated_at", "id"), REVIEW_PAGE_SIZE).get_page(approvals_page)
    return unknown, approvals


def items_page_effects(items) -> dict[int, list[Effect]]:
    by_item: dict[int, list[Effect]] = {}
    for effect in Effect.objects.filter(owner_item__in=[str(i.pk) for i in items]).order_by("id"):
        by_item.setdefault(int(effect.owner_item), []).append(effect)
    return by_item
