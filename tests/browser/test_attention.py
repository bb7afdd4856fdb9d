"""Attention first: every page's header counts what needs a person, each count a
link to where it is acted on, and each acted on within two clicks.

Before: a task that needed review only because items *failed* showed nothing on
Review ("No unknown effects… Nothing waits for approval"); Review had no count;
no tile counted suspended tasks or approvals; a suspended task said "12 queued"
of items that will not run."""

import pytest
from playwright.sync_api import expect

from ticketagent.models import Event, EventType, Item, ItemStatus, Task, TaskStatus

from .conftest import assert_no_alerts, assert_same_page, docs_screenshot, login, mark_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _counts(page):
    return {k: page.locator(f"#att-{k} b").inner_text() for k in ("unknown", "approvals", "failed", "suspended")}


def test_every_header_counts_what_needs_a_person_and_links_to_where_it_is_done(page, live_server, operator_world,
                                                                               alice):
    world = operator_world
    login(page, "alice", "alice-pass-123")
    for url in ("/", f"/tasks/{world['running'].pk}/", "/workers/", "/ledger/actions/", "/search/?q=x"):
        page.goto(url)
        assert _counts(page) == {"unknown": "1", "approvals": "1", "failed": "1", "suspended": "1"}, url
        expect(page.locator("#nav-review-count")).to_have_text("4")
    page.goto("/")
    docs_screenshot(page.locator("#attention"), "attention")
    for tile, n in (("suspended", "1"), ("approvals", "1"), ("failed", "1"), ("unknown", "1")):
        expect(page.locator(f"#tile-{tile} b")).to_have_text(n)

    # one click on a count lands on the section where it is acted on; the second click acts
    page.goto(f"/tasks/{world['running'].pk}/")
    page.locator("#att-suspended").click()
    page.get_by_role("link", name="Resume…").click()
    expect(page.locator("#confirm-resume")).to_be_visible()
    page.goto("/ledger/actions/")
    page.locator("#att-approvals").click()
    expect(page.locator(f"#approval-{world['waiting'].pk}").get_by_role("button", name="Approve")).to_be_visible()
    page.locator("#att-unknown").click()
    expect(page.locator(f"#effect-{world['effect'].pk}").get_by_role("button", name="Decide")).to_be_visible()


def test_a_failed_item_of_a_task_that_needs_review_is_skipped_from_review_with_a_reason(page, live_server,
                                                                                       operator_world, alice):
    world = operator_world
    failed = world["failed"]
    login(page, "alice", "alice-pass-123")
    page.goto(f"/tasks/{world['review'].pk}/")
    page.locator("#att-failed").click()  # click 1
    row = page.locator(f"#failed-{failed.pk}")
    expect(row).to_contain_text("R-1")
    expect(row).to_contain_text("body too long")
    docs_screenshot(page.locator("#failed"), "review-failed")
    mark_page(page)

    row.get_by_label("reason to skip").fill("   ")
    row.get_by_role("button", name="Skip").click()
    expect(row.locator("[role=alert]")).to_contain_text("a reason is required")
    assert Item.objects.get(pk=failed.pk).status == ItemStatus.FAILED

    row.get_by_label("reason to skip").fill("The customer withdrew the request")
    row.get_by_role("button", name="Skip").click()  # click 2
    expect(row).to_have_attribute("data-status", "skipped")
    expect(page.locator("#att-failed b")).to_have_text("0", timeout=15_000)  # the header is live
    assert_same_page(page)
    skipped = Event.objects.get(type=EventType.ITEM_SKIPPED, item=failed)
    assert skipped.actor == "alice" and skipped.payload["reason"] == "The customer withdrew the request"
    assert Task.objects.get(pk=world["review"].pk).status == TaskStatus.NEEDS_REVIEW  # the approval still waits

    # the approval settles the rest: the item is requeued and the task runs again
    page.reload()
    approval = page.locator(f"#approval-{world['waiting'].pk}")
    approval.get_by_label("reason").fill("The customer asked for it")
    approval.get_by_role("button", name="Approve").click()
    expect(approval).to_contain_text("approved by alice")
    page.reload()
    expect(page.locator(".audit")).to_contain_text("item skipped by alice — “The customer withdrew the request”")
    expect(page.locator(".audit")).to_contain_text("close_ticket approved by alice")
    assert_no_alerts(page)


def test_a_failed_item_is_retried_from_review_and_its_task_runs_again(page, live_server, operator_world, alice):
    world = operator_world
    login(page, "alice", "alice-pass-123")
    page.goto("/review/#failed")
    row = page.locator(f"#failed-{world['failed'].pk}")
    row.get_by_role("button", name="Retry").click()
    expect(row).to_contain_text("retried: attempt 2")
    item = Item.objects.get(pk=world["failed"].pk)
    assert item.status == ItemStatus.QUEUED and item.attempt == 2
    assert Event.objects.filter(type=EventType.ITEM_REQUEUED, item=item, actor="alice").exists()
    assert Task.objects.get(pk=world["review"].pk).status == TaskStatus.RUNNING


def test_a_suspended_task_says_its_queued_items_are_held(page, live_server, operator_world, alice):
    world = operator_world
    login(page, "alice", "alice-pass-123")
    page.goto("/")
    row = page.locator(f"#task-{world['suspended'].pk}")
    expect(row).to_contain_text("held until resume 2")
    expect(row).not_to_contain_text("queued 2")
    page.goto(f"/tasks/{world['suspended'].pk}/")
    expect(page.locator("#progress")).to_contain_text("held until resume 2")
    expect(page.locator("#held-note")).to_contain_text("do not run until the task is resumed")
    expect(page.locator("table.items")).to_contain_text("held until resume")
