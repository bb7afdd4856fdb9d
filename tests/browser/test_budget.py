"""A budget, as an operator meets it, at desktop and phone width: the upload sets it, real workers reach it against
the fake model server and the task page says why the task stopped; the dry-run projects what is left will cost and
asks for a new budget; a raised one finishes the task. Tokens and cost on the task list, the task page and the item
page are the fake server's usage (42 prompt + 4,096 completion tokens a call: the most a call may answer) times the
price, exactly; the prompt is priced at nothing, so each call costs exactly what it reserves ($0.076)."""

import json
import re
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from ticketagent.llm.base import MAX_COMPLETION_TOKENS
from ticketagent.models import Task, TaskStatus

from ..factories import csv_batch
from .conftest import (
    assert_accessible,
    assert_fits_the_screen,
    assert_keyboard_reaches_every_action,
    assert_no_alerts,
    docs_screenshot,
    login,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# $0.076 a call of the fake: 4,096 completion tokens at $18.5546875 per 1M (exact in binary too)
PRICES = {"gpt-4o-mini": {"input": 0, "cached_input": 0, "output": float(Decimal(76_000) / MAX_COMPLETION_TOKENS)}}


def check(page, where: str) -> None:
    assert_fits_the_screen(page, where)
    assert_accessible(page, where)


@pytest.mark.parametrize("width", [1400, 390])
def test_a_budget_stops_the_task_the_dry_run_projects_the_cost_and_a_raised_budget_finishes_it(
        page, live_server, openai_server, workers, sandbox, alice, settings, width):
    settings.MODEL_PRICES = {name: {k: Decimal(str(v)) for k, v in p.items()} for name, p in PRICES.items()}
    openai_server.usage = (42, MAX_COMPLETION_TOKENS)
    workers.start(1, extra_env={**openai_server.worker_env, "MODEL_PRICES": json.dumps(PRICES)})
    login(page, "alice", "alice-pass-123")
    page.set_viewport_size({"width": width, "height": 900})

    page.goto("/upload/")
    page.locator("input[name=file]").set_input_files(
        {"name": "budget.csv", "mimeType": "text/csv", "buffer": csv_batch(4)})
    expect(page.get_by_label("Budget (optional)")).to_be_visible()
    page.get_by_label("Budget (optional)").fill("$0.50")
    page.get_by_role("button", name="Upload and start").click()
    page.wait_for_url(re.compile(r"/tasks/\d+/$"))
    task = Task.objects.get()
    assert task.budget_usd == Decimal("0.50")

    # two items done ($0.456); the third's triage would pass the budget: refused before it started
    expect(page.locator("#task-status")).to_have_text("suspended", timeout=60_000)
    expect(page.locator("#status-reason")).to_have_text("budget reached: $0.456 of $0.50")
    expect(page.locator("#task-tokens")).to_have_text("24,828")
    expect(page.locator("#task-cost")).to_have_text("$0.456")
    expect(page.locator("#budget-spent")).to_have_text("$0.456 of $0.50")
    expect(page.locator("#task-budget")).to_contain_text("each model call reserves what it can cost at most")

    page.locator("#controls #resume").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#projected-cost")).to_contain_text("Projected cost of what is left: $0.456")
    expect(page.locator("#projected-cost")).to_contain_text("6 model steps still to run in 2 items")
    expect(page.locator("#projected-cost")).to_contain_text("from 6 calls: $0.076 a call")
    budget = page.get_by_label("New budget")
    expect(budget).to_have_attribute("required", "")
    check(page, "the dry-run of a task that reached its budget")
    if width > 390:
        page.evaluate("() => document.activeElement && document.activeElement.blur()")
        docs_screenshot(page.locator("#task-head"), "budget")
    assert_keyboard_reaches_every_action(page, "the dry-run of a task that reached its budget")

    budget.fill("$0.456")  # not above what was spent: refused, nothing changes
    page.locator("#confirm-resume").click()
    expect(page.locator("#controls [role=alert]")).to_have_text(
        "budget: $0.456 is not above what the task has spent ($0.456)")
    task.refresh_from_db()
    assert (task.status, task.resume_count, task.budget_usd) == (TaskStatus.SUSPENDED, 0, Decimal("0.50"))

    page.locator("#controls #resume").click()
    page.get_by_label("New budget").fill("$1.50")
    page.locator("#confirm-resume").click()
    expect(page.locator("#controls [role=status]")).to_have_text("Resumed: 2 items enqueued.")
    expect(page.locator("#task-status")).to_have_text("completed", timeout=60_000)
    # 12 calls
    expect(page.locator("#task-tokens")).to_have_text("49,656")
    expect(page.locator("#task-cost")).to_have_text("$0.912")
    expect(page.locator("#budget-spent")).to_have_text("$0.912 of $1.50")
    check(page, "the completed task")

    page.goto("/")
    row = page.locator(f"#task-{task.pk}")
    expect(row.locator(".tokens")).to_have_text("49,656 tokens")
    expect(row.locator(".cost")).to_have_text("$0.912")
    expect(row.locator(".budget")).to_have_text("budget $0.912 of $1.50")
    expect(page.locator("#tile-usage b")).to_have_text("$0.912")
    expect(page.locator("#tokens-today")).to_have_text("49,656")
    check(page, "the task list")

    third = task.items.order_by("row")[2]
    page.goto(f"/items/{third.pk}/")
    rows = page.locator("#model-steps tbody tr")
    expect(rows).to_have_count(3)
    for n, step in enumerate(("triage", "draft", "decide")):
        expect(rows.nth(n)).to_have_attribute("data-step", step)
        expect(rows.nth(n).locator(".tokens")).to_have_text("4,138")
        expect(rows.nth(n).locator(".cost")).to_have_text("$0.076")
    expect(page.locator("#item-tokens")).to_have_text("12,414")
    expect(page.locator("#item-cost")).to_have_text("$0.228")
    check(page, "the item page")
    assert_keyboard_reaches_every_action(page, "the item page")
    assert_no_alerts(page)
    assert page.console_errors == []
