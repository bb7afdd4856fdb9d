"""A task's budget for its model calls: read from what a person typed, compared with what was spent, renewed on resume.

A budget is money (USD, by the price table: `llm/prices.py`) or tokens
(prompt + completion). What a task with a budget has spent is counted on its
row (`Task.spent_usd`, `Task.spent_tokens`) by the pipeline, in the phase of
each model step (`pipeline/budget.py`); reaching the budget suspends the task,
and its resume asks for a new budget above what was spent.
"""

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from django.conf import settings

from ticketagent.llm.prices import configured_price, dollars
from ticketagent.models import Task
from ticketagent.services import ServiceError

HOW = "an amount in USD (5, $5.00) or tokens (200000 tokens, 200k tokens)"
MAX_USD = Decimal("1000000")
MAX_TOKENS = 10**15
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


def budget_reached(task: Task) -> bool:
    if task.budget_usd is not None:
        return task.spent_usd >= task.budget_usd
    if task.budget_tokens is not None:
        return task.spent_tokens >= task.budget_tokens
    return False


def budget_spent(task: Task) -> str:
    """What the task spent of its budget, in the budget's unit: "$4.98 of $5.00", "1,530 of 1,500 tokens"."""
    if task.budget_usd is not None:
        return f"{dollars(task.spent_usd)} of {dollars(task.budget_usd)}"
    return f"{task.spent_tokens:,} of {task.budget_tokens:,} tokens"


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
