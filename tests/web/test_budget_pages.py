"""Usage, cost and budgets on the pages: the task list, task and item pages, the tiles, /metrics, the dry-run's
projected cost, the upload's budget field and the resume with a new budget (operators only; a bad budget changes
nothing and says which field). Real rows: items run in this process against the fake model server, whose every
answer is 42 prompt + 17 completion tokens, priced here at $0.076 a call; each call's bound (what it reserves of
the budget) is taken to be that, so the numbers are exact."""

from decimal import Decimal

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from tests.fakes.openai_server import openai_server, openai_server_session  # noqa: F401 - fixtures
from ticketagent.models import Event, EventType, Task, TaskStatus
from ticketagent.pipeline.budget import Bound
from ticketagent.pipeline.run import item_process
from ticketagent.services.budget import Budget, task_reason

from ..factories import csv_batch, make_task
from .conftest import HTMX
from .test_metrics import scrape

pytestmark = pytest.mark.django_db(transaction=True)

PRICE = {"gpt-4o-mini": {"input": Decimal(1000), "cached_input": Decimal(500), "output": Decimal(2000)}}


@pytest.fixture
def spent(openai_server, sandbox, queue, settings, monkeypatch):  # noqa: F811 - the fixture imported above
    """A task of 3 items with a $0.31 budget: the first done ($0.228), the second's triage fit ($0.304), its draft
    did not: suspended."""
    settings.MODEL_PRICES = PRICE
    monkeypatch.setattr("ticketagent.pipeline.allowance.call_bound",
                        lambda **_: Bound(usd=Decimal("0.076"), tokens=59))
    task = make_task(3, budget=Budget(usd=Decimal("0.31")))
    for item in task.items.order_by("row")[:2]:
        item_process(item_id=item.pk, attempt=item.attempt)
    task.refresh_from_db()
    assert task.status == TaskStatus.SUSPENDED and task_reason(task) == "budget reached: $0.304 of $0.31"
    return task


def body(response) -> str:
    return response.content.decode()


class TestUsageShown:
    def test_the_task_list_the_task_page_and_the_tiles(self, client, bob, spent):
        client.force_login(bob)
        listed = body(client.get(reverse("tasks")))
        assert "236 tokens</span> · <span class=\"cost\">$0.304</span>" in listed
        assert "budget $0.304 of $0.31" in listed
        assert '<small class="reason">budget reached: $0.304 of $0.31</small>' in listed
        assert '<b>$0.304</b><span>model cost today · <span id="tokens-today">236</span> tokens' in listed
        page = body(client.get(reverse("task-detail", args=[spent.pk])))
        assert '<b id="task-tokens">236</b> tokens' in page and '<b id="task-cost">$0.304</b>' in page
        assert "(168 prompt, of which 0 cached; 68 completion; 4 calls)" in page
        assert '<b id="budget-spent">$0.304 of $0.31</b>' in page
        assert '<span class="reason" id="status-reason">budget reached: $0.304 of $0.31</span>' in page
        assert "each model call reserves what it can cost at most before it starts" in page
        assert 'id="budget-reserved"' not in page, "nothing in flight"

    def test_the_item_page_per_model_step(self, client, bob, spent):
        client.force_login(bob)
        first = spent.items.order_by("row").first()
        page = body(client.get(reverse("item-detail", args=[first.pk])))
        for step in ("triage", "draft", "decide"):
            assert f'<tr data-step="{step}">' in page
        assert page.count('<td data-label="Tokens" class="tokens">59</td>') == 3
        assert page.count('<td data-label="Cost" class="cost">$0.076</td>') == 3
        assert '<b id="item-tokens">177</b> tokens in 3 calls · cost <b id="item-cost">$0.228</b>' in page

    def test_metrics_count_tokens_by_kind_and_cost(self, client, bob, spent):
        client.force_login(bob)
        samples = scrape(client)
        assert samples["ticketagent_model_tokens_total{kind=prompt}"] == 4 * 42
        assert samples["ticketagent_model_tokens_total{kind=completion}"] == 4 * 17
        assert samples["ticketagent_model_tokens_total{kind=cached}"] == 0
        assert samples["ticketagent_model_calls_total"] == 4
        assert samples["ticketagent_model_cost_usd_total"] == pytest.approx(0.304)
        assert samples["ticketagent_model_unpriced_steps_total"] == 0

    def test_a_model_without_a_price_has_an_unknown_cost_and_its_tokens_count(self, client, bob, sandbox, queue,
                                                                              openai_server, settings,  # noqa: F811
                                                                              monkeypatch):
        monkeypatch.setattr("ticketagent.llm.prices.endpoint_is_local", lambda base_url: False)  # as if remote
        settings.OPENAI_MODEL = "mystery-model"
        item = make_task(1).items.get()
        assert item_process(item_id=item.pk, attempt=item.attempt) == "done"
        client.force_login(bob)
        page = body(client.get(reverse("task-detail", args=[item.task_id])))
        assert '<b id="task-tokens">177</b>' in page and '<b id="task-cost">—</b>' in page
        assert "a model it called has no price: see MODEL_PRICES" in page
        assert '177 tokens</span> · <span class="cost">—</span>' in body(client.get(reverse("tasks")))
        assert scrape(client)["ticketagent_model_unpriced_steps_total"] == 3


class TestDryRun:
    def test_it_projects_the_cost_of_what_is_left_and_asks_for_a_new_budget(self, client, alice, spent):
        client.force_login(alice)
        fragment = body(client.get(reverse("task-dry-run", args=[spent.pk]), headers=HTMX))
        assert "Projected cost of what is left: <b>$0.38</b>" in fragment
        assert ("(5 model steps still to run in 2 items, each at the mean cost of that step so far, from 4 calls: "
                "$0.076 a call)") in fragment
        assert 'name="budget"' in fragment and " required>" in fragment
        assert "The task reached its budget: $0.304 of $0.31" in fragment

    def test_nothing_can_be_said_before_a_call_is_made(self, client, bob, queue):
        task = make_task(2)
        Task.objects.filter(pk=task.pk).update(status=TaskStatus.PAUSED)
        client.force_login(bob)
        fragment = body(client.get(reverse("task-dry-run", args=[task.pk]), headers=HTMX))
        assert "Projected cost of what is left: <b>—</b>" in fragment
        assert "nothing can be said yet" in fragment and 'name="budget"' not in fragment


class TestResumeWithABudget:
    def url(self, task):
        return reverse("task-resume", args=[task.pk])

    def test_a_viewer_may_not(self, client, bob, spent):
        client.force_login(bob)
        assert client.post(self.url(spent), {"budget": "$5"}).status_code == 403
        assert client.post(self.url(spent), {"budget": "$5"}, headers=HTMX).status_code == 403
        spent.refresh_from_db()
        assert (spent.status, spent.budget_usd, spent.resume_count) == (TaskStatus.SUSPENDED, Decimal("0.31"), 0)

    @pytest.mark.parametrize("typed,words", [
        ("lots", "budget: &#x27;lots&#x27; is not an amount in USD"),
        ("", "budget: this task reached its budget ($0.304 of $0.31)"),
        ("$0.30", "budget: $0.30 is not above what the task has spent ($0.304)"),
    ])
    def test_a_bad_budget_names_the_field_and_changes_nothing(self, client, alice, spent, typed, words):
        client.force_login(alice)
        for headers in ({}, HTMX):
            response = client.post(self.url(spent), {"budget": typed}, headers=headers)
            assert response.status_code == 409 and words in body(response)
        spent.refresh_from_db()
        assert (spent.status, spent.budget_usd, spent.resume_count) == (TaskStatus.SUSPENDED, Decimal("0.31"), 0)
        assert not Event.objects.filter(task=spent, type=EventType.RESUMED).exists()

    def test_a_raised_budget_resumes(self, client, alice, spent):
        client.force_login(alice)
        response = client.post(self.url(spent), {"budget": "2000 tokens"})
        assert response.status_code == 302
        spent.refresh_from_db()
        assert (spent.status, spent.budget_usd, spent.budget_tokens) == (TaskStatus.RUNNING, None, 2000)


class TestUploadBudget:
    def upload(self, client, budget, name="b.csv"):
        return client.post(reverse("upload"), {"file": SimpleUploadedFile(name, csv_batch(2)), "budget": budget,
                                               "notify_channel": "helpdesk", "failure_threshold": 3})

    def test_the_budget_field(self, client, alice, queue):
        client.force_login(alice)
        bad = self.upload(client, "five dollars")
        assert bad.status_code == 400 and not Task.objects.exists()
        assert "&#x27;five dollars&#x27; is not an amount in USD (5, $5.00) or tokens" in body(bad)
        assert '<label for="id_budget">Budget (optional)</label>' in body(bad)
        assert self.upload(client, "200k tokens").status_code == 302
        assert Task.objects.get().budget_tokens == 200_000

    def test_money_needs_a_price_for_the_model(self, client, alice, queue, settings):
        settings.OPENAI_API_KEY, settings.OPENAI_MODEL = "sk-test", "mystery-model"
        settings.OPENAI_BASE_URL = "https://api.example.com/v1"
        client.force_login(alice)
        refused = self.upload(client, "$5")
        assert refused.status_code == 400 and not Task.objects.exists()
        assert "budget: no price is known for the model mystery-model" in body(refused)
