"""What an item came to, as an operator filters a task's items by it.

"done" hides whether anything happened: an item is done *with effects* when
the ledger holds at least one committed effect of it (a draft saved, the
customer notified, the ticket updated or closed), and done *with nothing
sent* otherwise (the decision chose no action, or every action was skipped).
"""

from django.db.models import CharField, Count, Exists, OuterRef, Q
from django.db.models.functions import Cast

from ledger.models import Effect, EffectState
from ticketagent.models import Item, ItemStatus

# the task page's item filters: (key, label), in the order shown
SHOWS = [
    ("all", "all"),
    ("sent", "done with effects"),
    ("nothing", "done, nothing sent"),
    ("waiting", "waiting for a person"),
    ("failed", "failed"),
    ("running", "running"),
    ("queued", "queued"),
    ("skipped", "skipped"),
]
_WAITING = (ItemStatus.WAITING_REVIEW, ItemStatus.WAITING_APPROVAL)


def outer_item_effects():
    """The effects of the item a subquery is about (`OuterRef("pk")`: the ledger keeps the owner as text)."""
    return Effect.objects.filter(owner_item=Cast(OuterRef("pk"), output_field=CharField()))


def _committed():
    return outer_item_effects().filter(state=EffectState.COMMITTED)


def items_shown(items, show: str):
    """`items` (a queryset) narrowed to one of SHOWS; an unknown key shows them all."""
    if show == "sent":
        return items.filter(status=ItemStatus.DONE).filter(Exists(_committed()))
    if show == "nothing":
        return items.filter(status=ItemStatus.DONE).exclude(Exists(_committed()))
    if show == "waiting":
        return items.filter(status__in=_WAITING)
    if show in ("failed", "running", "queued", "skipped"):
        return items.filter(status=show)
    return items


def done_nothing_sent(task_ids) -> dict[int, int]:
    """Per task: its done items with no committed effect (one query)."""
    rows = (Item.objects.filter(task__in=task_ids, status=ItemStatus.DONE)
            .annotate(sent=Exists(_committed())).values("task_id")
            .annotate(n=Count("pk", filter=Q(sent=False))))
    return {row["task_id"]: row["n"] for row in rows}


def show_counts(status_counts: dict, nothing_sent: int) -> dict[str, int]:
    """How many items each filter shows, from the task's counts by status and its done items with nothing sent."""
    done = status_counts.get(ItemStatus.DONE, 0)
    return {
        "all": sum(status_counts.values()),
        "sent": done - nothing_sent,
        "nothing": nothing_sent,
        "waiting": sum(status_counts.get(s, 0) for s in _WAITING),
        **{s: status_counts.get(s, 0) for s in ("failed", "running", "queued", "skipped")},
    }
