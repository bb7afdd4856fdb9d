"""A budget is a bound at any concurrency, on real worker processes with many threads and a slow fake model server:
each model call reserves what it can cost at most before it starts, so a task never counts more than its budget
and stops within one call of it; the reason line and the page say the same spent figure; a worker killed mid-call
does not keep its reservation once its lease is gone; the dry-run projects what is left from the calls made so far.

The fake server here answers every call with 2,000 prompt + 2,000 completion tokens, priced at $1 per 1M tokens
either way: $0.004 a call. A call's bound is its request's bytes as prompt tokens + MAX_COMPLETION_TOKENS.
"""

import json
import signal
from decimal import Decimal

import pytest
from django.urls import reverse

from ticketagent.eventlog.usage import task_usage
from ticketagent.llm.base import MAX_COMPLETION_TOKENS
from ticketagent.models import Item, ItemStatus, Task, TaskStatus
from ticketagent.services.budget import BUDGET_REACHED, Budget, budget_reserved
from ticketagent.services.resume import task_dry_run, task_resume

from ..conftest import wait_for
from ..factories import make_task

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PRICES = {"gpt-4o-mini": {"input": 1, "cached_input": 1, "output": 1}}
USAGE = (2000, 2000)
CALL_USD = Decimal(sum(USAGE)) / 1_000_000  # $0.004
THREADS = 8


@pytest.fixture
def heavy(openai_server, settings):
    """The fake model answering each call after 1 s with 4,000 tokens; the workers' settings, priced as here."""
    settings.MODEL_PRICES = {name: {k: Decimal(v) for k, v in price.items()} for name, price in PRICES.items()}
    openai_server.usage, openai_server.latency = USAGE, 1.0
    # the client waits longer than the answers take (the suite's 1 s timeout against a 1 s answer: on a loaded
    # machine calls timed out, the endpoint counted as down, the calls of every thread waited for it with their
    # reservations held, and the task stopped short of its budget)
    yield {**openai_server.worker_env, "MODEL_PRICES": json.dumps(PRICES), "WORKER_THREADS": str(THREADS),
           "OPENAI_TIMEOUT": "10"}
    openai_server.latency = 0.0


def most_bound_usd(server) -> Decimal:
    """The largest bound of a call the server saw (its body's bytes stand in for the prompt's, with slack)."""
    size = max(len(json.dumps(r["body"], ensure_ascii=False).encode()) for r in server.requests)
    return Decimal(size + 200 + MAX_COMPLETION_TOKENS) / 1_000_000


def most_in_flight(server) -> int:
    """The most calls the server held at once (each answered `latency` after it arrived)."""
    arrivals = sorted(r["at"] for r in server.requests)
    return max(sum(1 for a in arrivals if at - server.latency < a <= at) for at in arrivals)


def settled(task) -> bool:
    task.refresh_from_db()
    return task.status == TaskStatus.SUSPENDED and not task.items.filter(status=ItemStatus.RUNNING).exists()


def test_many_threads_in_flight_stop_within_one_call_of_the_budget(heavy, openai_server, workers, sandbox, client,
                                                                    alice):
    budget = Decimal("0.06")  # 15 calls' actual cost; each reserves about twice that
    task = make_task(32, budget=Budget(usd=budget))
    # and leases as deployed (the suite's 4 s could lapse on a starved machine: a lapsed lease's reservation stops
    # counting, as a dead worker's does)
    workers.start(2, extra_env={**heavy, "LEASE_SECONDS": "30"})
    wait_for(lambda: settled(task), timeout=180, interval=0.3, message=lambda: f"the task suspended\n{workers.logs()}")
    workers.stop_all()

    task.refresh_from_db()
    assert most_in_flight(openai_server) >= 3, "calls of the task were in flight at once"
    assert task.status_reason == BUDGET_REACHED
    assert task.spent_usd <= budget + CALL_USD, f"spent {task.spent_usd} of {budget}: more than one call over"
    assert task.spent_usd <= budget, "a call never costs more than it reserved"
    assert task.spent_usd > budget - most_bound_usd(openai_server), "stopped within one call of the budget"
    assert task.spent_usd == task_usage(task.pk).cost_usd, "what the row counts is what the steps' events record"
    assert budget_reserved(task.pk) == (0, 0), "nothing in flight holds a reservation"

    client.force_login(alice)
    page = client.get(reverse("task-detail", args=[task.pk])).content.decode()
    spent = f"{task.spent_usd.normalize():f}".rstrip("0")
    shown = f"${spent}" if len(spent.split(".")[1]) > 2 else f"${Decimal(spent):.2f}"
    assert f'<span class="reason" id="status-reason">budget reached: {shown} of $0.06</span>' in page, page
    assert f'<b id="budget-spent">{shown} of $0.06</b>' in page
    assert f'<b id="task-cost">{shown}</b>' in page


def test_a_killed_workers_reservation_does_not_hold_the_budget(heavy, openai_server, workers, sandbox):
    openai_server.latency = 3.0  # calls in flight when the worker is killed
    budget = Decimal("0.05")
    task = make_task(24, budget=Budget(usd=budget))
    [worker] = workers.start(1, extra_env=heavy)
    # the calls in flight reserved their bounds (more than they will cost)
    wait_for(lambda: budget_reserved(task.pk)[0] >= 3 * CALL_USD, timeout=60, interval=0.05, message="calls in flight")
    workers.kill(worker, signal.SIGKILL)
    held = Item.objects.filter(task=task, status=ItemStatus.RUNNING, reserved_usd__gt=0).count()
    assert held >= 1, "the killed worker's items keep their reservations on their rows"
    # their leases expire (LEASE_SECONDS): the reservations no longer count, though nobody released them
    wait_for(lambda: budget_reserved(task.pk) == (0, 0), timeout=60, interval=0.2,
             message="the killed worker's reservations to stop counting")

    openai_server.latency = 0.5
    workers.start(1, extra_env=heavy)  # its start's sweep takes the killed worker's items over
    wait_for(lambda: settled(task), timeout=180, interval=0.3, message=lambda: f"the task suspended\n{workers.logs()}")
    task.refresh_from_db()
    assert task.status_reason == BUDGET_REACHED
    assert budget - most_bound_usd(openai_server) < task.spent_usd <= budget, "it could spend up to its budget"
    taken_over = Item.objects.filter(task=task, attempt__gt=1).count()
    assert taken_over >= held

    task_resume(task_id=task.pk, actor="alice", budget=Budget(usd=Decimal("1")))
    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.COMPLETED, timeout=240, interval=0.3,
             message=lambda: f"the task completed with a raised budget\n{workers.logs()}")
    workers.stop_all()
    assert sandbox.counts()["duplicates"] == 0


def test_the_dry_run_projects_from_the_calls_made_when_no_item_is_done(openai_server, sandbox, queue, settings):
    """Items suspended mid-way: none done, yet their calls' cost is known, so what is left is projected from it."""
    from ticketagent.pipeline.run import item_process

    settings.MODEL_PRICES = {name: {k: Decimal(v) for k, v in price.items()} for name, price in PRICES.items()}
    openai_server.usage = USAGE
    task = make_task(3)
    first, second, third = task.items.order_by("row")
    openai_server.script(["valid", "valid", "400"])  # the first item's triage and draft; its decide refused
    assert item_process(item_id=first.pk, attempt=first.attempt) == "failed at decide: bad_request"
    openai_server.script(["valid", "400"])  # the second item's triage; its draft refused
    assert item_process(item_id=second.pk, attempt=second.attempt) == "failed at draft: bad_request"
    assert not Item.objects.filter(task=task, status=ItemStatus.DONE).exists()

    plan = task_dry_run(task_id=task.pk)
    assert plan.calls_known == 3 and plan.call_cost == CALL_USD
    assert sorted(plan.model_steps) == sorted(["decide", "draft", "decide", "triage", "draft", "decide"])
    assert plan.projected_cost == 6 * CALL_USD, "each step at the mean of that step so far, or of a call"
