"""Budgets, checked in one process: what a person may type, where the pipeline checks and counts, what resume asks.

The fake model answers every call with 42 prompt + 17 completion tokens; an item makes three calls (triage,
draft, decide), so 177 tokens an item.
"""

import json
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ticketagent.eventlog.usage import task_usage
from ticketagent.models import Event, EventType, Item, ItemStatus, Task, TaskStatus
from ticketagent.pipeline.budget import Bound
from ticketagent.pipeline.run import item_process
from ticketagent.services import ServiceError
from ticketagent.services.budget import BUDGET_REACHED, Budget, budget_parse, budget_reserved, task_reason
from ticketagent.services.resume import task_dry_run, task_resume

from ..factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)

CALL_TOKENS = 42 + 17


@pytest.fixture
def exact_bound(monkeypatch):
    """Each call's bound (what it reserves of the budget) taken to be what the fake answers cost: exact numbers."""
    monkeypatch.setattr("ticketagent.pipeline.allowance.call_bound",
                        lambda **_: Bound(usd=Decimal("0.076"), tokens=CALL_TOKENS))


def run(item: Item) -> str:
    item.refresh_from_db()
    return item_process(item_id=item.pk, attempt=item.attempt)


class TestBudgetParse:
    @pytest.mark.parametrize("text,budget", [
        ("", None), ("  ", None),
        ("5", Budget(usd=Decimal("5"))), ("$5.00", Budget(usd=Decimal("5.00"))), ("$ 0.30", Budget(usd=Decimal("0.30"))),
        ("1,000 USD", Budget(usd=Decimal("1000"))), ("0.0005", Budget(usd=Decimal("0.0005"))),
        ("200000 tokens", Budget(tokens=200_000)), ("200k tokens", Budget(tokens=200_000)),
        ("1.5M tokens", Budget(tokens=1_500_000)), ("1,500tokens", Budget(tokens=1500)), ("1 token", Budget(tokens=1)),
    ])
    def test_money_or_tokens(self, text, budget):
        assert budget_parse(text) == budget

    @pytest.mark.parametrize("text", ["lots", "0", "$0", "-5", "5 EUR", "1.5 tokens", "0 tokens", "$0.00001",
                                      "5e3", "10000000 USD", "tokens"])
    def test_anything_else_names_the_field(self, text):
        with pytest.raises(ServiceError, match=r"^budget: .* is not an amount in USD"):
            budget_parse(text)

    def test_labels(self):
        assert Budget(usd=Decimal("5")).label == "$5.00" and Budget(tokens=200_000).label == "200,000 tokens"


def test_a_budget_in_money_needs_a_price_for_the_model(openai_server, settings):
    settings.OPENAI_BASE_URL = "https://api.example.com/v1"
    settings.OPENAI_MODEL = "mystery-model"
    with pytest.raises(ServiceError, match="budget: no price is known for the model mystery-model"):
        make_task(1, budget=Budget(usd=Decimal("5")))
    assert not Task.objects.exists()
    assert make_task(1, budget=Budget(tokens=1000)).budget_tokens == 1000, "tokens need no price"


def test_a_task_without_a_budget_pays_nothing_for_budgets_in_its_steps(openai_server, sandbox, queue):
    plain, budgeted = make_task(3, prefix="P"), make_task(3, prefix="B", budget=Budget(tokens=10**6))
    statements = {}
    for task in plain, budgeted:
        first, second, _ = task.items.order_by("row")
        assert run(first) == "done"
        with CaptureQueriesContext(connection) as queries:
            assert run(second) == "done"
        statements[task] = [q["sql"] for q in queries.captured_queries]
    assert not any(sql.startswith('UPDATE "ticketagent_task"') for sql in statements[plain])
    # a model step of a task with a budget: its call's reservation (the task and the item locked, the reservations
    # in flight summed, the item's written), the task locked in the step's phase, its counters and the item's
    # reservation written
    assert len(statements[budgeted]) - len(statements[plain]) == 3 * 9
    plain.refresh_from_db()
    budgeted.refresh_from_db()
    assert (plain.spent_tokens, plain.spent_usd) == (0, 0) and budgeted.spent_tokens == 2 * 3 * CALL_TOKENS
    assert task_usage(plain.pk).total == task_usage(budgeted.pk).total == 2 * 3 * CALL_TOKENS


def test_reaching_a_token_budget_suspends_the_task_and_the_counters_match_the_events(openai_server, sandbox, queue,
                                                                                      exact_bound):
    task = make_task(3, budget=Budget(tokens=400))
    first, second, third = task.items.order_by("row")
    assert run(first) == "done" and run(second) == "done"
    assert openai_server.calls == 6
    # 354 spent: the third item's triage would pass the budget, and no call is in flight: suspended, nothing called
    assert run(third) == "stopped at triage: task suspended"
    assert openai_server.calls == 6
    task.refresh_from_db()
    assert task.status == TaskStatus.SUSPENDED and task.status_reason == BUDGET_REACHED
    assert task_reason(task) == "budget reached: 354 of 400 tokens"
    assert task.spent_tokens == 6 * CALL_TOKENS == task_usage(task.pk).total
    suspended = Event.objects.get(task=task, type=EventType.SUSPENDED)
    assert suspended.payload["spent_tokens"] == 354 and suspended.payload["last_success_item"] == second.pk
    assert suspended.payload["call_bound_tokens"] == CALL_TOKENS
    third.refresh_from_db()
    assert third.status == ItemStatus.QUEUED, "handed back before its call"
    assert Event.objects.filter(item=third, type=EventType.ITEM_STOPPED).exists()
    assert budget_reserved(task.pk) == (0, 0)


def test_an_item_of_a_task_whose_budget_another_worker_spent_stops_before_its_call(openai_server, sandbox, queue,
                                                                                    exact_bound):
    task = make_task(2, budget=Budget(tokens=1000))
    first, second = task.items.order_by("row")
    assert run(first) == "done"
    Task.objects.filter(pk=task.pk).update(spent_tokens=1000)  # another worker's steps, recorded meanwhile
    calls = openai_server.calls
    assert run(second) == "stopped at triage: task suspended"
    assert openai_server.calls == calls, "no call once the budget is reached"
    task.refresh_from_db()
    assert task.status == TaskStatus.SUSPENDED and task_reason(task) == "budget reached: 1,000 of 1,000 tokens"
    second.refresh_from_db()
    assert second.status == ItemStatus.QUEUED


def test_resume_asks_for_a_new_budget_above_what_was_spent_and_then_finishes(openai_server, sandbox, queue, settings,
                                                                             exact_bound):
    settings.MODEL_PRICES = {"gpt-4o-mini": {"input": Decimal(1000), "cached_input": Decimal(500),
                                             "output": Decimal(2000)}}  # $0.076 a call
    task = make_task(3, budget=Budget(usd=Decimal("0.31")))
    first, second, third = task.items.order_by("row")
    assert run(first) == "done"
    assert run(second) == "stopped at draft: task suspended", "its triage fit ($0.304), its draft did not"
    task.refresh_from_db()
    assert task_reason(task) == "budget reached: $0.304 of $0.31" and task.spent_usd == Decimal("0.304")
    assert task_usage(task.pk).cost_usd == Decimal("0.304")
    event = Event.objects.filter(item=first, type=EventType.STEP_DONE, payload__step="triage").get()
    assert json.loads(json.dumps(event.payload["usage"]))["cost_usd"] == "0.076"

    plan = task_dry_run(task_id=task.pk)
    assert plan.budget_reached and plan.call_cost == Decimal("0.076") and plan.calls_known == 4
    assert plan.model_items == 2 and plan.projected_cost == 5 * Decimal("0.076"), "draft, decide; and all three"
    for budget, words in ((None, "budget: this task reached its budget"),
                          (Budget(usd=Decimal("0.304")), r"budget: \$0.304 is not above what the task has spent"),
                          (Budget(tokens=200), "budget: 200 tokens is not above")):
        with pytest.raises(ServiceError, match=words):
            task_resume(task_id=task.pk, actor="alice", budget=budget)
    task.refresh_from_db()
    assert (task.status, task.resume_count, task.budget_usd) == (TaskStatus.SUSPENDED, 0, Decimal("0.31"))

    task_resume(task_id=task.pk, actor="alice", budget=Budget(usd=Decimal("2")))
    assert Event.objects.get(task=task, type=EventType.RESUMED).payload["budget"] == "$2.00"
    assert run(second) == "done" and run(third) == "done"
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED and task.budget_usd == Decimal("2")
    assert task.spent_usd == Decimal("0.076") * 9 == task_usage(task.pk).cost_usd


def test_a_task_without_a_budget_is_given_none_on_resume(openai_server, sandbox, queue):
    task = make_task(1)
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.PAUSED)
    with pytest.raises(ServiceError, match="budget: this task was created without a budget"):
        task_resume(task_id=task.pk, actor="alice", budget=Budget(tokens=100))
    task_resume(task_id=task.pk, actor="alice")


def test_a_call_waits_for_the_calls_in_flight_unless_its_item_holds_a_reservation_itself(queue):
    """Another item's call in flight holds the room left: a step's first call waits for it (it may cost less than it
    reserved); a later call of a step whose item holds a reservation already does not wait -- two such items would
    wait for each other -- and the task is suspended."""
    from django.db import transaction
    from django.utils import timezone

    from ticketagent.pipeline.budget import STOP, WAIT, budget_reserve_locked

    task = make_task(2, budget=Budget(tokens=1000))
    first, second = task.items.order_by("row")
    live = timezone.now() + timezone.timedelta(minutes=5)
    Item.objects.filter(pk=first.pk).update(status=ItemStatus.RUNNING, lease_expires_at=live, reserved_tokens=600)
    Item.objects.filter(pk=second.pk).update(status=ItemStatus.RUNNING, lease_expires_at=live)
    bound = Bound(usd=Decimal(0), tokens=500)
    with transaction.atomic():
        task = Task.objects.select_for_update().get(pk=task.pk)
        assert budget_reserve_locked(task, Item.objects.get(pk=second.pk), bound) == WAIT
    assert Task.objects.get(pk=task.pk).status != TaskStatus.SUSPENDED
    Item.objects.filter(pk=second.pk).update(reserved_tokens=100)  # its step's first call reserved already
    with transaction.atomic():
        task = Task.objects.select_for_update().get(pk=task.pk)
        assert budget_reserve_locked(task, Item.objects.get(pk=second.pk), bound) == STOP
    task.refresh_from_db()
    assert task.status == TaskStatus.SUSPENDED and task_reason(task) == "budget reached: 0 of 1,000 tokens"
