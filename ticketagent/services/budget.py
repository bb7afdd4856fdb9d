"""A task's budget for its model calls: read from what a person typed, compared with what was spent, renewed on resume.

A budget is money (USD, by the price table: `llm/prices.py`) or tokens
(prompt + completion). It is a bound: each model call reserves what it can
cost at most before it starts, and a step's phase counts what its calls cost
on the task's row (`Task.spent_usd`, `Task.spent_tokens`): `pipeline/budget.py`.
A task whose next call no longer fits is suspended ("budget reached"), and its
resume asks for a new budget above what was spent. Pages and the reason line
say what was spent from the same row (`budget_spent`), and what calls in
flight hold (`budget_reserved`).
"""

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.db.models import Q, Sum
from django.db.models.functions import Coalesce, Now

from ticketagent.llm.prices import configured_price, dollars
from ticketagent.models import Item, ItemStatus, Task, TaskStatus
from ticketagent.services import ServiceError

HOW = "an amount in USD (5, $5.00) or tokens (200000 tokens, 200k tokens)"
MAX_USD = Decimal("1000000")
MAX_TOKENS = 10**15
BUDGET_REACHED = "budget reached"  # a suspended task's reason: rendered with what it spent (`task_reason`)
_MONEY = re.compile(r"^(?:\$\s*)?([0-9][0-9,]*(?:\.[0-9]+)?)(?:\s*(?:usd|\$))?$", re.IGNORECASE)
_TOKENS = re.compile(r"^([0-9][0-9,]*(?:\.[0-9]+)?)\s*([km])?\s*tokens?$", re.IGNORECASE)
_SCALE = {None: 1, "k": 1_000, "m": 1_000_000}


@dataclass(frozen=True)
class Budget:
    """One of the two: USD or tokens."""

    usd: Decimal | None = None
    tokens: int | None = None

    @property
    def label(self) -> str:
        return dollars(self.usd) if self.usd is not None else f"{self.tokens:,} tokens"


def _number(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None


def budget_parse(text: str) -> Budget | None:
    """What a person typed as a budget ("$5", "5.00", "200000 tokens", "200k tokens"), or None when it is empty;
    a ServiceError naming the field for anything else."""
    text = " ".join((text or "").split())
    if not text:
        return None
    tokens, money = _TOKENS.match(text), _MONEY.match(text)
    amount = _number((tokens or money).group(1)) if tokens or money else None
    if tokens and amount is not None:
        count = amount * _SCALE[(tokens.group(2) or "").lower() or None]
        if count == count.to_integral_value() and 0 < count <= MAX_TOKENS:
            return Budget(tokens=int(count))
    elif money and amount is not None:
        if 0 < amount <= MAX_USD and amount.as_tuple().exponent >= -4:
            return Budget(usd=amount)
    raise ServiceError(f"budget: {text[:40]!r} is not {HOW}, above zero (at most 4 decimals of a dollar)")


def budget_priced(budget: Budget | None) -> None:
    """A budget in money needs a price for the configured model; ServiceError naming the field otherwise."""
    if budget is not None and budget.usd is not None and configured_price() is None:
        raise ServiceError(f"budget: no price is known for the model {settings.OPENAI_MODEL}, so a budget in USD "
                           f"cannot be kept: add it to MODEL_PRICES, or give the budget in tokens")


def budget_spent_all(task: Task) -> bool:
    """What the task spent is its budget or more."""
    if task.budget_usd is not None:
        return task.spent_usd >= task.budget_usd
    if task.budget_tokens is not None:
        return task.spent_tokens >= task.budget_tokens
    return False


def budget_reached(task: Task) -> bool:
    """The task spent its budget, or was suspended because its next model call no longer fit in it."""
    return budget_spent_all(task) or (task.status == TaskStatus.SUSPENDED and task.status_reason == BUDGET_REACHED)


def budget_spent(task: Task) -> str:
    """What the task spent of its budget, in the budget's unit: "$4.98 of $5.00", "1,530 of 1,500 tokens"."""
    if task.budget_usd is not None:
        return f"{dollars(task.spent_usd)} of {dollars(task.budget_usd)}"
    return f"{task.spent_tokens:,} of {task.budget_tokens:,} tokens"


def budget_reserved(task_id: int, *, but: int | None = None) -> tuple[Decimal, int]:
    """What the model calls in flight of the task reserved (USD, tokens), one query: the reservations of its items
    whose lease is live -- running, its deadline not passed on the database's clock -- (`but` one item not
    counted). A worker that died mid-call leaves its item's reservation, which stops counting with its lease."""
    live = Q(task_id=task_id, status=ItemStatus.RUNNING, lease_expires_at__gt=Now())
    if but is not None:
        live &= ~Q(pk=but)
    row = Item.objects.filter(live).aggregate(usd=Coalesce(Sum("reserved_usd"), Decimal(0)),
                                              tokens=Coalesce(Sum("reserved_tokens"), 0))
    return row["usd"], row["tokens"]


def budget_reserved_label(task: Task) -> str:
    """What the task's calls in flight hold of its budget, in its unit ("$0.02", "8,200 tokens"), or "" for none."""
    usd, tokens = budget_reserved(task.pk)
    if task.budget_usd is not None:
        return dollars(usd) if usd else ""
    return f"{tokens:,} tokens" if tokens else ""


def task_reason(task: Task) -> str:
    """The line that says why the task stands as it does; for a budget suspension, with what it spent of its
    budget now -- the numbers the page shows beside it (`budget_spent`), not those of the moment it stopped."""
    if task.status_reason == BUDGET_REACHED and task.has_budget:
        return f"{BUDGET_REACHED}: {budget_spent(task)}"
    return task.status_reason


def budget_renew_locked(task: Task, budget: Budget | None) -> None:
    """Inside the resume's transaction, the task locked: its new budget (required once the old one was reached),
    above what the task has spent in its unit. ServiceError naming the field otherwise; nothing is written."""
    if budget is None:
        if budget_reached(task):
            raise ServiceError(f"budget: this task reached its budget ({budget_spent(task)}): give a new budget "
                               f"above what it spent to resume it")
        return
    if not task.has_budget:
        raise ServiceError("budget: this task was created without a budget; its spending is not counted")
    budget_priced(budget)
    spent = dollars(task.spent_usd) if budget.usd is not None else f"{task.spent_tokens:,} tokens"
    if (budget.usd is not None and budget.usd <= task.spent_usd) or (
            budget.tokens is not None and budget.tokens <= task.spent_tokens):
        raise ServiceError(f"budget: {budget.label} is not above what the task has spent ({spent})")
    task.budget_usd, task.budget_tokens = budget.usd, budget.tokens
