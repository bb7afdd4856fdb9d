"""Reads for the dashboard: one query per concern, no N+1."""

from dataclasses import dataclass

from django.db.models import Count, Max, Min, Q
from django.utils import timezone

from ledger.models import BlockedDuplicate, Effect, EffectState
from ticketagent.models import Event, EventType, Item, ItemStatus, Task, TaskStatus

ITEM_ORDER = [s.value for s in ItemStatus]


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


def task_progress(task: Task) -> Progress:
    counts = dict(Item.objects.filter(task=task).values_list("status").annotate(n=Count("id")))
    total = sum(counts.values())
    done = sum(counts.get(s, 0) for s in (ItemStatus.DONE, ItemStatus.SKIPPED, ItemStatus.FAILED))
    per_minute = eta = None
    window = Item.objects.filter(task=task, finished_at__isnull=False).aggregate(
        first=Min("finished_at"), last=Max("finished_at"))
    started = task.started_at or task.created_at
    if done and window["last"]:
        elapsed = max((window["last"] - started).total_seconds(), 1.0)
        per_minute = done / elapsed * 60
        remaining = total - done - sum(counts.get(s, 0) for s in (ItemStatus.WAITING_REVIEW,
                                                                  ItemStatus.WAITING_APPROVAL))
        if task.status in (TaskStatus.RUNNING, TaskStatus.QUEUED) and remaining > 0 and per_minute > 0:
            eta = int(remaining / per_minute * 60)
    percent = int(100 * done / total) if total else 0
    return Progress(total, counts, done, percent, per_minute, eta)


FILTERS = {
    "running": (TaskStatus.QUEUED, TaskStatus.RUNNING),
    "suspended": (TaskStatus.SUSPENDED, TaskStatus.PAUSED, TaskStatus.NEEDS_MIGRATION),
    "needs_review": (TaskStatus.NEEDS_REVIEW,),
    "done": (TaskStatus.COMPLETED, TaskStatus.CANCELLED),
}


def tasks_for_dashboard(*, status_filter: str = "", limit: int = 50) -> list[Task]:
    qs = Task.objects.all()
    if status_filter in FILTERS:
        qs = qs.filter(status__in=FILTERS[status_filter])
    # Suspended tasks first: they are the ones waiting for a person.
    suspended = list(qs.filter(status=TaskStatus.SUSPENDED).order_by("-id")[:limit])
    rest = list(qs.exclude(status=TaskStatus.SUSPENDED).order_by("-id")[: max(limit - len(suspended), 0)])
    tasks = suspended + rest
    counts: dict[int, dict] = {}
    for task_id, status, n in Item.objects.filter(task__in=[t.pk for t in tasks]).values_list(
            "task_id", "status").annotate(n=Count("id")):
        counts.setdefault(task_id, {})[status] = n
    for task in tasks:
        c = counts.get(task.pk, {})
        total = sum(c.values())
        ended = sum(c.get(s, 0) for s in (ItemStatus.DONE, ItemStatus.SKIPPED, ItemStatus.FAILED))
        task.item_counts = c
        task.item_total = total
        task.percent = int(100 * ended / total) if total else 0
    return tasks


def health_numbers() -> dict:
    now = timezone.now()
    unknown = Effect.objects.filter(state=EffectState.UNKNOWN).aggregate(n=Count("id"), oldest=Min("updated_at"))
    oldest_age = (now - unknown["oldest"]).total_seconds() if unknown["oldest"] else 0.0
    return {
        "resumes": Event.objects.filter(type=EventType.RESUMED).count(),
        "recoveries": Event.objects.filter(type=EventType.RECOVERED).count(),
        "unknown": unknown["n"],
        "unknown_oldest_seconds": oldest_age,
        "blocked_duplicates": BlockedDuplicate.objects.count(),
        "items_by_state": dict(Item.objects.values_list("status").annotate(n=Count("id"))),
        "effects_by_state": dict(Effect.objects.values_list("state").annotate(n=Count("id"))),
        "tasks_by_state": dict(Task.objects.values_list("status").annotate(n=Count("id"))),
    }


def review_queue():
    unknown = Effect.objects.filter(state=EffectState.UNKNOWN).order_by("updated_at")
    approvals = Item.objects.filter(status=ItemStatus.WAITING_APPROVAL).select_related("task").order_by("updated_at")
    return unknown, approvals


def task_effects(task: Task):
    return Effect.objects.filter(owner_task=str(task.pk)).order_by("id")


def items_page_effects(items) -> dict[int, list[Effect]]:
    by_item: dict[int, list[Effect]] = {}
    for effect in Effect.objects.filter(owner_item__in=[str(i.pk) for i in items]).order_by("id"):
        by_item.setdefault(int(effect.owner_item), []).append(effect)
    return by_item


def effect_filter_open():
    return Q(state__in=(EffectState.UNKNOWN, EffectState.INTENT))
