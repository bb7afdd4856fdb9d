"""Search by ticket id, customer email or task name across tasks, and an item's full history.

Before: finding a ticket by its id or a customer's email across tasks was impossible."""

import pytest
from playwright.sync_api import expect

from ticketagent.models import Item
from ticketagent.pipeline.run import item_process

from ..factories import make_task
from .conftest import docs_screenshot, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_search_from_any_page_finds_tickets_customers_and_tasks(page, live_server, operator_world, alice):
    world = operator_world
    login(page, "alice", "alice-pass-123")
    page.goto(f"/tasks/{world['running'].pk}/")
    page.get_by_label("Search tickets, customers, tasks").fill("R-1")
    page.get_by_label("Search tickets, customers, tasks").press("Enter")
    page.wait_for_url("**/search/?q=R-1")
    expect(page.locator(f"#result-item-{world['failed'].pk}")).to_contain_text("Needs review batch")

    page.get_by_label("Search tickets, customers, tasks").fill("CUST2@example.com")
    page.get_by_role("button", name="Search", exact=True).first.click()
    results = page.locator("table.results tbody tr")
    expect(results).to_have_count(3)  # T-2, R-2 and Q-2: one customer across three tasks
    expect(page.locator("table.results")).to_contain_text("Suspended batch")

    page.goto("/search/?q=review")
    expect(page.locator(f"#result-task-{world['review'].pk}")).to_contain_text("Needs review batch")
    page.goto(f"/search/?q={world['running'].pk}")
    expect(page.locator(f"#result-task-{world['running'].pk}")).to_be_visible()
    page.goto("/search/?q=nobody@example.com")
    expect(page.locator("table.results")).to_contain_text(
        "No ticket's id, customer email or subject contains “nobody@example.com”")
    page.get_by_label("Search tickets, customers, tasks").fill("example.com")  # a domain: part of the emails
    page.get_by_label("Search tickets, customers, tasks").press("Enter")
    expect(page.locator("table.results tbody tr")).to_have_count(Item.objects.count())
    expect(page.locator("#search-what")).to_contain_text("customer email (so a domain such as example.com)")


def test_an_items_page_tells_its_whole_history_with_times(page, live_server, queue, sandbox, alice):
    task = make_task(1, name="History", body="Thanks, you can close this ticket now.", subject="All good")
    item = task.items.get()
    assert item_process(item_id=item.pk, attempt=item.attempt) == "waiting at close_ticket"
    login(page, "alice", "alice-pass-123")
    page.goto("/search/?q=T-1")
    page.get_by_role("link", name="T-1").first.click()
    history = page.locator("#history")
    expect(history).to_contain_text("attempt 1 started at step triage")
    for step in ("triage", "draft", "decide", "save_draft", "notify_customer", "set_status"):
        expect(history.locator("li[data-type=STEP_DONE]", has_text=f"· {step}")).to_have_count(1)
    expect(history.locator("li[data-type=STEP_SKIPPED]", has_text="escalate")).to_have_count(1)
    expect(history).to_contain_text("approval requested")
    assert history.locator("li time").count() == history.locator("li").count()
    effects = page.locator("#effects .effect")
    expect(effects).to_have_count(3)
    expect(effects.first).to_contain_text("intent → committed")
    docs_screenshot(page.locator("#history"), "item-history")
