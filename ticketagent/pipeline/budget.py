"""A task's budget in the pipeline: each model call reserves what it can cost at most; a step's phase counts the cost.

The promise: what a task counts as spent never passes its budget, at any
concurrency, and the task stops within one call of it -- once the next call's
bound no longer fits in what is left.

Reserve. Before each model call (the model client asks `CallAllowance.reserve`
once per call, whatever its retries), the call's bound is priced: its request's
bytes as prompt tokens (every token stands for one byte or more) plus
MAX_COMPLETION_TOKENS, which the request carries as its limit, at the model's
uncached input and output prices (`call_bound`). A true bound, not an average:
a call can never cost more than it reserved, so calls in flight cannot pass
the budget together. In one phase holding the task, then the item under its
lease (`phases.phase_reserve`), the bound is reserved if what the task spent,
what its calls in flight hold (`services.budget.budget_reserved`) and the bound
fit in its budget; it is written on the item (`Item.reserved_usd`,
`reserved_tokens`). If it does not fit while other items' calls are in flight,
the call waits for them (`RESERVE_WAIT_SECONDS`): they may cost less than they
reserved -- unless it is a step's second call or later (a tool turn, a schema
retry) and its item holds a reservation already: two such items would wait for
each other. Otherwise the task reached its budget: it is suspended ("budget
reached") and the item is handed back.

Count. The model step's phase, holding the task, adds what its calls cost (the
API's usage, priced) to the task's row and sets the item's reservation to 0
(`task_spend_locked`).

Crash-safety: a reservation lives on its item and counts only while the item's
lease is live (running, its deadline not passed on the database's clock). A
worker killed mid-call leaves its reservation on the item; it stops counting
when the lease expires, and the item's next lease starts at 0. Nothing has to
release it, so nothing can leak it. The calls of a step that never reached its
phase (its worker died, the model failed, the task stopped) are not counted,
as their usage is not recorded: the task counts what its steps' events record,
the figure its page shows.

A task without a budget pays nothing for this: the model client gets no
allowance, so no query and no write.
"""

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import F

from ticketagent.llm.prices import configured_price
from ticketagent.models import ACTIVE_TASK_STATUSES, Item, Task
from ticketagent.services.budget import BUDGET_REACHED, budget_reserved, budget_spent_all
from ticketagent.services.tasks import task_suspend_locked

# How often a call that does not fit yet looks again while other calls of its task are in flight (they take seconds).
RESERVE_WAIT_SECONDS = 1.0

RESERVED, WAIT, STOP = "reserved", "wait", "stop"  # a reservation's answers (STOP: the item stops)


@dataclass(frozen=True)
class Bound:
    """What one model call can cost at most: USD (0 for a model without a price: its task's budget is in tokens)
    and tokens."""

    usd: Decimal
    tokens: int


def call_bound(*, prompt_tokens: int, completion_tokens: int) -> Bound:
    """A call's bound, at the configured model's price (every prompt token at the uncached input price)."""
    price = configured_price()
    usd = Decimal(0) if price is None else price.cost(prompt_tokens=prompt_tokens, cached_tokens=0,
                                                       completion_tokens=completion_tokens)
    return Bound(usd=usd, tokens=prompt_tokens + completion_tokens)


def _fits(task: Task, usd: Decimal, tokens: int) -> bool:
    """What the task spent plus `usd` / `tokens` is within its budget, in the budget's unit."""
    if task.budget_usd is not None:
        return task.spent_usd + usd <= task.budget_usd
    return task.spent_tokens + tokens <= task.budget_tokens


def budget_reserve_locked(task: Task, item: Item, bound: Bound) -> str:
    """Inside a phase holding the running task, then the item: RESERVED (the bound is written on the item), WAIT
    (it does not fit while other items' calls are in flight, and this item holds none) or STOP (it does not fit
    otherwise: the task is suspended)."""
    others_usd, others_tokens = budget_reserved(task.pk, but=item.pk)
    if _fits(task, others_usd + item.reserved_usd + bound.usd, others_tokens + item.reserved_tokens + bound.tokens):
        Item.objects.filter(pk=item.pk).update(reserved_usd=F("reserved_usd") + bound.usd,
                                               reserved_tokens=F("reserved_tokens") + bound.tokens)
        return RESERVED
    if (others_usd or others_tokens) and not (item.reserved_usd or item.reserved_tokens):
        return WAIT  # (an item holding a reservation, mid-step, never waits: two such would wait for each other)
    task_suspend_locked(task, reason=BUDGET_REACHED, spent_usd=str(task.spent_usd), spent_tokens=task.spent_tokens,
                        call_bound_usd=str(bound.usd), call_bound_tokens=bound.tokens)
    return STOP


def task_spend_locked(task: Task, item_id: int, usage: dict) -> None:
    """Inside a model step's phase holding the task and the item: add what the step's calls cost (a step without
    a price adds its tokens only), the item's reservation back to 0, and suspend the task if it spent its
    budget."""
    task.spent_tokens += usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
    if usage.get("cost_usd") is not None:
        task.spent_usd += Decimal(usage["cost_usd"])
    task.save(update_fields=["spent_tokens", "spent_usd", "updated_at"])
    Item.objects.filter(pk=item_id).update(reserved_usd=0, reserved_tokens=0)
    if task.status in ACTIVE_TASK_STATUSES and budget_spent_all(task):
        task_suspend_locked(task, reason=BUDGET_REACHED, spent_usd=str(task.spent_usd),
                            spent_tokens=task.spent_tokens)
