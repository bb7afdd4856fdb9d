"""The health numbers (resumes, unknowns, blocked duplicates, counts by state, model usage today), counted once, shared.

The recovery sweep counts them every HEALTH_CACHE_SECONDS and shares them
through the cache, so no page view waits for whole-table counts. They are
the one source of every count a page shows of the whole system: the
header's "needs a person" counts are read from the same snapshot
(`web.selectors.review.attention_counts`), so a tile, the header and
"items by state" never disagree; each says when it was counted (`as_of`).
A person's change forgets the snapshot (`health_numbers_forget`), so their
own act shows at once.
"""

import logging

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, Min
from django.utils import timezone

from ledger.models import BlockedDuplicate, Effect, EffectState
from ticketagent.eventlog.usage import usage_since
from ticketagent.models import Event, EventType, Item, ItemStatus, Task, TaskStatus

log = logging.getLogger(__name__)


HEALTH_CACHE_KEY = "health-numbers"


def health_numbers() -> dict:
    """`health_numbers_now()`, shared through the cache for
    HEALTH_CACHE_SECONDS: whole-table counts cost tens of milliseconds at
    300k effects, and every open dashboard polls them; with the cache the
    database counts once per interval however many people watch (and while
    the recovery sweep runs, it does the counting: `health_numbers_refresh`).
    Without Redis the numbers are counted for each request."""
    ttl = settings.HEALTH_CACHE_SECONDS
    if ttl <= 0:
        return health_numbers_now()
    try:
        numbers = cache.get(HEALTH_CACHE_KEY)
    except Exception:  # noqa: BLE001 - the cache is an optimisation; Redis down must not break the page
        log.debug("health numbers: cache unavailable", exc_info=True)
        numbers = None
    if numbers is None:
        numbers = health_numbers_now()
        _share(numbers, ttl)
    return numbers


def health_numbers_refresh(ttl: float | None = None) -> None:
    """Count now and share the numbers. The recovery sweep calls this every
    HEALTH_CACHE_SECONDS (`ttl`), so that no viewer waits for the count; they
    are kept for two intervals, to outlive one late refresh."""
    ttl = settings.HEALTH_CACHE_SECONDS if ttl is None else ttl
    if ttl > 0:
        _share(health_numbers_now(), 2 * ttl)


def health_numbers_forget() -> None:
    """The next read counts again: a person changed something the counts show."""
    try:
        cache.delete(HEALTH_CACHE_KEY)
    except Exception:  # noqa: BLE001 - without Redis each request counts for itself
        log.debug("health numbers: cache unavailable", exc_info=True)


def _share(numbers: dict, seconds: float) -> None:
    try:
        cache.set(HEALTH_CACHE_KEY, numbers, seconds)
    except Exception:  # noqa: BLE001 - without Redis each request counts for itself
        log.debug("health numbers: cache unavailable", exc_info=True)


def health_numbers_now() -> dict:
    """The dashboard tiles and /metrics, from the database.

    Counts are `COUNT(*)`, not `COUNT(id)`: PostgreSQL then answers the
    per-state counts from the (state, ...) indexes alone (index-only scans)
    instead of reading every row -- 2-3x faster at 300k effects
    (docs/benchmarks.md, "Profiling").

    The age of the oldest unknown counts from its intent: how long nobody
    has known whether that action happened (reconcile attempts do not reset it).
    """
    now = timezone.now()
    unknown = Effect.objects.filter(state=EffectState.UNKNOWN).aggregate(n=Count("*"), oldest=Min("intent_at"))
    oldest_age = max((now - unknown["oldest"]).total_seconds(), 0.0) if unknown["oldest"] else 0.0
    return {
        "as_of": now,
        "resumes": Event.objects.filter(type=EventType.RESUMED).count(),
        "recoveries": Event.objects.filter(type=EventType.RECOVERED).count(),
        "unknown": unknown["n"],
        "unknown_oldest_seconds": oldest_age,
        "blocked_duplicates": BlockedDuplicate.objects.count(),
        "items_by_state": dict(Item.objects.values_list("status").annotate(n=Count("*"))),
        "effects_by_state": dict(Effect.objects.values_list("state").annotate(n=Count("*"))),
        "tasks_by_state": dict(Task.objects.values_list("status").annotate(n=Count("*"))),
        # the failed items Review asks a person about: those of tasks that need review
        "failed_to_review": Item.objects.filter(status=ItemStatus.FAILED, task__status=TaskStatus.NEEDS_REVIEW).count(),
        # the model calls of today, in TIME_ZONE: tokens and cost (eventlog.usage)
        "usage_today": usage_since(timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)),
    }
