"""What model calls cost, summed from the usage their STEP_DONE events record: per step, item, task, day, in all.

Each model step's event carries its calls' tokens, milliseconds and, when
the model had a price, their cost (`llm/prices.py`: frozen when recorded,
so these sums do not move when prices do). A total's cost is known only
when every step summed had a price: one without makes it unknown (None),
while its tokens still count. Each read is one query, through the two
partial indexes of the usage events (by task, by time: `USAGE_EVENTS`).
"""

from decimal import Decimal

from django.db.models import BigIntegerField, Count, DecimalField, Q, Sum, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce

from ticketagent.llm.base import Usage
from ticketagent.models import USAGE_EVENTS, Event

USAGE_FIELDS = ("calls", "prompt_tokens", "completion_tokens", "cached_tokens", "ms")
COST = DecimalField(max_digits=24, decimal_places=9)


def usage_events():
    return Event.objects.filter(USAGE_EVENTS)


def _sums() -> dict:
    sums = {name: Coalesce(Sum(Cast(KT(f"payload__usage__{name}"), BigIntegerField())), 0) for name in USAGE_FIELDS}
    sums["cost"] = Coalesce(Sum(Cast(KT("payload__usage__cost_usd"), COST)), Value(Decimal(0)), output_field=COST)
    sums["unpriced"] = Count("pk", filter=Q(payload__usage__cost_usd__isnull=True))
    return sums


def _usage(row: dict) -> Usage:
    """Summed `usage` as one Usage (its milliseconds as seconds; the cost None if a step had no price)."""
    return Usage(calls=row["calls"], prompt_tokens=row["prompt_tokens"], completion_tokens=row["completion_tokens"],
                 cached_tokens=row["cached_tokens"], seconds=(row["ms"] or 0) / 1000,
                 cost_usd=None if row["unpriced"] else row["cost"])


def task_usage(task_id: int) -> Usage:
    """The model calls of the whole task (0 when the model recorded none: the offline model)."""
    return _usage(usage_events().filter(task_id=task_id).aggregate(**_sums()))


def tasks_usage(task_ids) -> dict[int, Usage]:
    """Per task: one query for all of them (a task with no model call yet is absent)."""
    rows = usage_events().filter(task_id__in=list(task_ids)).order_by().values("task_id").annotate(**_sums())
    return {row["task_id"]: _usage(row) for row in rows}


def items_usage(item_ids) -> dict[int, Usage]:
    """Per item, the sum of its model steps' usage: one query for all of them."""
    rows = usage_events().filter(item_id__in=list(item_ids)).order_by().values("item_id").annotate(**_sums())
    return {row["item_id"]: _usage(row) for row in rows}


def usage_since(moment) -> Usage:
    """Every task's model calls recorded since `moment` (today's: since local midnight)."""
    return _usage(usage_events().filter(timestamp__gte=moment).aggregate(**_sums()))


def usage_total() -> dict:
    """Every model call recorded, for counters: the usage fields, `cost` (of the steps with a price) and
    `unpriced` (steps without one)."""
    return usage_events().aggregate(**_sums())


def step_costs(task_id: int) -> dict[str, tuple[int, int, Decimal]]:
    """Per model step name, the task's recorded steps with a known cost: (steps, calls, cost), one query."""
    rows = (usage_events().filter(task_id=task_id, payload__usage__cost_usd__isnull=False).order_by()
            .values(step=KT("payload__step"))
            .annotate(steps=Count("pk"), calls=Coalesce(Sum(Cast(KT("payload__usage__calls"), BigIntegerField())), 0),
                      cost=Sum(Cast(KT("payload__usage__cost_usd"), COST))))
    return {row["step"]: (row["steps"], row["calls"], row["cost"]) for row in rows}


def step_usages(item_id: int) -> tuple[list[tuple[Event, Usage]], Usage]:
    """Each model step of the item that called the model, in order (every attempt's), with what it cost; and
    their sum."""
    steps, total = [], Usage(cost_usd=Decimal(0))
    for event in usage_events().filter(item_id=item_id).order_by("id"):
        usage = event.payload["usage"]
        cost = usage.get("cost_usd")
        step = Usage(calls=usage.get("calls", 0), prompt_tokens=usage.get("prompt_tokens", 0),
                     completion_tokens=usage.get("completion_tokens", 0), cached_tokens=usage.get("cached_tokens", 0),
                     seconds=usage.get("ms", 0) / 1000, model=usage.get("model", ""),
                     cost_usd=None if cost is None else Decimal(cost))
        steps.append((event, step))
        for name in ("calls", "prompt_tokens", "completion_tokens", "cached_tokens", "seconds"):
            setattr(total, name, getattr(total, name) + getattr(step, name))
        total.cost_usd = None if total.cost_usd is None or step.cost_usd is None else total.cost_usd + step.cost_usd
    return steps, total
