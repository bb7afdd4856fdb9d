"""Budgets on real workers with the fake model server: a task suspends with the reason when its budget is reached,
what it spent is the server's usage times the price exactly, and a resume with a raised budget finishes it.

The fake server answers every call with 42 prompt + 17 completion tokens; an item makes three calls (triage,
draft, decide). MODEL_PRICES prices the model at $1,000 / $2,000 per 1M input / output tokens: $0.076 a call.
"""

import io
import json
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ticketagent.eventlog.usage import task_usage
from ticketagent.models import Event, EventType, ItemStatus, Task, TaskStatus
from ticketagent.services import ServiceError
from ticketagent.services.budget import Budget
from ticketagent.services.resume import task_dry_run, task_resume

from ..factories import csv_batch, make_task

pytestmark = pytest.mark.django_db(transaction=True)

PRICES = {"gpt-4o-mini": {"input": 1000, "cached_input": 500, "output": 2000}}
CALL_USD = (42 * Decimal(1000) + 17 * Decimal(2000)) / 1_000_000
CALL_TOKENS = 42 + 17


@pytest.fixture
def priced(openai_server, settings):
    """Workers' settings for the fake server, with the price above (and the same in this process)."""
    settings.MODEL_PRICES = {name: {k: Decimal(v) for k, v in price.items()} for name, price in PRICES.items()}
    return {**openai_server.worker_env, "MODEL_PRICES": json.dumps(PRICES)}


def test_a_task_suspends_at_its_budget_and_a_raised_budget_finishes_it(openai_server, workers, sandbox, priced):
    assert CALL_USD == Decimal("0.076")
    task = make_task(4, budget=Budget(usd=Decimal("0.50")))
    assert workers.burst(extra_env=priced) == 0, workers.logs()

    # two items done ($0.456), the third's triage passes the budget by its one call: suspended, nothing more runs
    task.refresh_from_db()
    assert task.status == TaskStatus.SUSPENDED, workers.logs()
    assert task.status_reason == "budget reached: $0.532 of $0.50"
    assert openai_server.calls == 7
    assert task.spent_usd == 7 * CALL_USD and task.spent_tokens == 7 * CALL_TOKENS
    usage = task_usage(task.pk)
    assert (usage.calls, usage.prompt_tokens, usage.completion_tokens, usage.cost_usd) == (7, 7 * 42, 7 * 17,
                                                                                           7 * CALL_USD)
    statuses = list(task.items.order_by("row").values_list("status", flat=True))
    assert statuses == [ItemStatus.DONE, ItemStatus.DONE, ItemStatus.QUEUED, ItemStatus.QUEUED]
    assert Event.objects.filter(task=task, type=EventType.SUSPENDED).count() == 1

    plan = task_dry_run(task_id=task.pk)
    assert plan.budget_reached and plan.model_items == 2
    assert plan.projected_cost == 2 * 3 * CALL_USD, "the mean of an item done x the items left"
    with pytest.raises(ServiceError, match=r"budget: \$0.50 is not above what the task has spent \(\$0.532\)"):
        task_resume(task_id=task.pk, actor="alice", budget=Budget(usd=Decimal("0.50")))

    task_resume(task_id=task.pk, actor="alice", budget=Budget(usd=Decimal("1.50")))
    assert workers.burst(extra_env=priced) == 0, workers.logs()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED and task.resume_count == 1
    # the third item kept its triage: two calls more, the fourth three
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
    made = command("upload", str(batch), "--budget", "400 tokens")
    assert made[0] == 0, made
    bad = command("upload", str(batch), "--budget", "lots")
    assert bad[0] != 0 and "--budget: 'lots' is not an amount in USD" in bad[2]
    [task] = Task.objects.all()
    assert task.budget_tokens == 400
    assert workers.burst(extra_env=priced) == 0, workers.logs()
    task.refresh_from_db()
    assert task.status == TaskStatus.SUSPENDED and task.status_reason == "budget reached: 413 of 400 tokens"
    assert task.spent_usd == 7 * CALL_USD, "counted in money too, whatever the budget's unit"

    refused = command("resume", str(task.pk))
    assert refused[0] != 0 and "--budget: this task reached its budget (413 of 400 tokens)" in refused[2]
    assert "projected cost of what is left: $0.228 (1 item(s) still call the model" in refused[1]
    low = command("resume", str(task.pk), "--budget", "413 tokens")
    assert low[0] != 0 and "--budget: 413 tokens is not above what the task has spent (413 tokens)" in low[2]
    resumed = command("resume", str(task.pk), "--budget", "1k tokens")
    assert resumed[0] == 0, resumed
    assert workers.burst(extra_env=priced) == 0, workers.logs()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED and task.spent_tokens == 9 * CALL_TOKENS == task_usage(task.pk).total
