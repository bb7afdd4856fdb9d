"""A task's budget as the pipeline keeps it: checked before each model call, spent in the model step's phase.

Only a task with a budget (`Task.has_budget`, read with the lease) pays
for this: before a model call one read of its row (`budget_allows`), and
its model steps' phases lock the task row to count what the step cost
(`task_spend_locked`). A task without a budget adds no query and no write
to a step. The check comes before the call, so each item already calling
the model when the budget is reached can pass it by that one step's calls.
"""

from decimal import Decimal

from ticketagent.models import ACTIVE_TASK_STATUSES, Task
from ticketagent.services.budget import budget_reached, budget_spent
from ticketagent.services.tasks import task_suspend_locked

BUDGET_FIELDS = ("status", "budget_usd", "budget_tokens", "spent_usd", "spent_tokens")


def budget_allows(task_id: int) -> bool:
    """Before a model call of a task with a budget (one read, no lock): the task still runs and has budget left."""
    task = Task.objects.only(*BUDGET_FIELDS).get(pk=task_id)
    return task.status in ACTIVE_TASK_STATUSES and not budget_reached(task)


def budget_enforce_locked(task: Task) -> None:
    """Inside a transaction holding the task: a running task that reached its budget is suspended, with why."""
    if task.status in ACTIVE_TASK_STATUSES and budget_reached(task):
        task_suspend_locked(task, reason=f"budget reached: {budget_spent(task)}",
                            spent_usd=str(task.spent_usd), spent_tokens=task.spent_tokens)


def task_spend_locked(task: Task, usage: dict) -> None:
    """Inside a model step's phase holding the task: add what the step's calls cost (a step without a price adds
    its tokens only) and suspend the task if that reached its budget."""
    task.spent_tokens += usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
    if usage.get("cost_usd") is not None:
        task.spent_usd += Decimal(usage["cost_usd"])
    task.save(update_fields=["spent_tokens", "spent_usd", "updated_at"])
    budget_enforce_locked(task)
