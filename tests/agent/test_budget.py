"""Budgets on real workers with the fake model server: a task suspends with the reason when its next call no longer
fits in its budget, what it spent is the server's usage times the price exactly, and a resume with a raised budget
finishes it.

The fake server answers every call with 42 prompt + 4,096 completion tokens -- the most a call may answer
(MAX_COMPLETION_TOKENS) -- and an item makes three calls (triage, draft, decide). MODEL_PRICES prices the model's
output so that a call costs $0.076, and its prompt at nothing: each call costs exactly what it reserves (its bound).
"""

import io
import json
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ticketagent.eventlog.usage import task_usage
from ticketagent.llm.base import MAX_COMPLETION_TOKENS
from ticketagent.models import Event, EventType, ItemStatus, Task, TaskStatus
from ticketagent.services import ServiceError
from ticketagent.services.budget import BUDGET_REACHED, Budget, task_reason
from ticketagent.services.resume import task_dry_run, task_resume

from ..factories import csv_batch, make_task

pytestmark = pytest.mark.django_db(transaction=True)

OUTPUT_PRICE = Decimal(76_000) / MAX_COMPLETION_TOKENS  # USD per 1M output tokens: $0.076 for a full answer
PRICES = {"gpt-4o-mini": {"input": 0, "cached_input": 0, "output": float(OUTPUT_PRICE)}}  # 18.5546875, exact
CALL_USD = Decimal("0.076")
CALL_TOKENS = 42 + MAX_COMPLETION_TOKENS


@pytest.fixture
def priced(openai_server, settings):
    """Workers' settings for the fake server, with the price above (and the same in this process)."""
    settings.MODEL_PRICES = {name: {k: Decimal(str(v)) for k, v in price.items()} for name, price in PRICES.items()}
    openai_server.usage = (42, MAX_COMPLETION_TOKENS)
    return {**openai_server.worker_env, "MODEL_PRICES": json.dumps(PRICES)}


def test_a_task_suspends_at_its_budget_and_a_raised_budget_finishes_it(openai_server, workers, sandbox, priced):
    task = make_task(4, budget=Budget(usd=Decimal("0.50")))
    assert workers.burst(extra_env=priced) == 0, workers.logs()

    # two items done ($0.456); the third's triage would pass the budget: suspended before it, nothing more runs
    task.refresh_from_db()
    assert task.status == TaskStatus.SUSPENDED, workers.logs()
    assert task.status_reason == BUDGET_REACHED and task_reason(task) == "budget reached: $0.456 of $0.50"
    assert openai_server.calls == 6
    assert task.spent_usd == 6 * CALL_USD and task.spent_tokens == 6 * CALL_TOKENS
    usage = task_usage(task.pk)
    assert (usage.calls, usage.prompt_tokens, usage.completion_tokens, usage.cost_usd) == (
        6, 6 * 42, 6 * MAX_COMPLETION_TOKENS, 6 * CALL_USD)
    statuses = list(task.items.order_by("row").values_list("status", flat=True))
    assert statuses == [ItemStatus.DONE, ItemStatus.DONE, ItemStatus.QUEUED, ItemStatus.QUEUED]
    assert Event.objects.filter(task=task, type=EventType.SUSPENDED).count() == 1

    plan = task_dry_run(task_id=task.pk)
    assert plan.budget_reached and plan.model_items == 2
    assert plan.projected_cost == 2 * 3 * CALL_USD, "each step left at the mean of that step so far"
    with pytest.raises(ServiceError, match=r"budget: \$0.456 is not above what the task has spent \(\$0.456\)"):
        task_resume(task_id=task.pk, actor="alice", budget=Budget(usd=Decimal("0.456")))

    task_resume(task_id=task.pk, actor="alice", budget=Budget(usd=Decimal("1.50")))
    assert workers.burst(extra_env=priced) == 0, workers.logs()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED and task.resume_count == 1
    assert openai_server.calls == 12
    assert task.spent_usd == 12 * CALL_USD == task_usage(task.pk).cost_usd == Decimal("0.912")
    assert task.spent_tokens == 12 * CALL_TOKENS == task_usage(task.pk).total
    assert sandbox.counts()["duplicates"] == 0


def command(*args: str) -> tuple[int, str, str]:
    """A management command in this process (its exit status, stdout, stderr): what a shell would see."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command(*args, stdout=out, stderr=err)
    except CommandError as exc:
        return 1, out.getvalue(), str(exc)
    return 0, out.getvalue(), err.getvalue()


def test_a_token_budget_from_the_commands(openai_server, workers, sandbox, priced, tmp_path):
    batch = tmp_path / "batch.csv"
    batch.write_bytes(csv_batch(3))
    made = command("upload", str(batch), "--budget", "30k tokens")
    assert made[0] == 0, made
    bad = command("upload", str(batch), "--budget", "lots")
    assert bad[0] != 0 and "--budget: 'lots' is not an amount in USD" in bad[2]
    [task] = Task.objects.all()
    assert task.budget_tokens == 30_000
    assert workers.burst(extra_env=priced) == 0, workers.logs()
    task.refresh_from_db()
    calls = openai_server.calls
    assert task.status == TaskStatus.SUSPENDED and task.status_reason == BUDGET_REACHED
    assert 0 < calls < 9 and task.spent_tokens == calls * CALL_TOKENS <= 30_000, "a call's bound is its most"
    spent = f"{task.spent_tokens:,} of 30,000 tokens"
    assert task_reason(task) == f"budget reached: {spent}"
    assert task.spent_usd == calls * CALL_USD, "counted in money too, whatever the budget's unit"

    refused = command("resume", str(task.pk))
    assert refused[0] != 0 and f"--budget: this task reached its budget ({spent})" in refused[2]
    assert "projected cost of what is left: $" in refused[1]
    low = command("resume", str(task.pk), "--budget", f"{task.spent_tokens} tokens")
    assert low[0] != 0 and f"is not above what the task has spent ({task.spent_tokens:,} tokens)" in low[2]
    resumed = command("resume", str(task.pk), "--budget", "1M tokens")
    assert resumed[0] == 0, resumed
    assert workers.burst(extra_env=priced) == 0, workers.logs()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED and task.spent_tokens == 9 * CALL_TOKENS == task_usage(task.pk).total
