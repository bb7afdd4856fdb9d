"""A task's items, filtered by what they came to, at desktop and phone width; the task list says how many done
items did something.

Before: with a weak model 9 of 23 "done" items had no effect at all (nothing drafted, sent or changed) and looked
like the rest; a task page was 14,946 px tall on a phone with no way to narrow its items."""

import pytest
from playwright.sync_api import expect

from ticketagent.models import Item, ItemStatus
from ticketagent.pipeline.run import item_process

from ..factories import make_task
from .conftest import assert_accessible, assert_fits_the_screen, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("width", [1400, 390])
def test_items_filter_by_outcome_and_status_paginated_and_the_task_list_counts_them(
        page, live_server, queue, sandbox, alice, width):
    task = make_task(60, name="Outcomes")
    items = list(task.items.order_by("row"))
    for item in items[:2]:  # two run for real: the offline model chooses actions, the helpdesk takes them
        assert item_process(item_id=item.pk, attempt=item.attempt) == "done"
    nothing = [i.pk for i in items[2:57]]  # done, but nothing was drafted, sent or changed
    Item.objects.filter(pk__in=nothing).update(status=ItemStatus.DONE)
    Item.objects.filter(pk=items[57].pk).update(status=ItemStatus.WAITING_APPROVAL)
    Item.objects.filter(pk=items[58].pk).update(status=ItemStatus.FAILED, last_error="triage: bad answer")

    login(page, "alice", "alice-pass-123")
    page.set_viewport_size({"width": width, "height": 900})
    row = page.locator(f"#task-{task.pk}")
    expect(row.locator(".with-effects")).to_have_text("2 with effects")
    expect(row.locator(".nothing-sent")).to_have_text("55 nothing sent")
    assert_accessible(page, "the task list")

    row.locator(".nothing-sent").click()
    expect(page.locator("#show-nothing")).to_have_attribute("aria-current", "true")
    expect(page.locator("#show-nothing b")).to_have_text("55")
    expect(page.locator("#show-sent b")).to_have_text("2")
    expect(page.locator("#show-waiting b")).to_have_text("1")
    expect(page.locator("#show-failed b")).to_have_text("1")
    expect(page.locator("#show-queued b")).to_have_text("1")
    rows = page.locator("table.items tbody tr")
    expect(rows).to_have_count(50)  # a page of them
    assert page.locator(f"#item-{items[0].pk}").count() == 0 and page.locator(f"#item-{items[2].pk}").count() == 1
    expect(page.locator("#items .pager")).to_contain_text("page 1 of 2")
    assert_fits_the_screen(page, "the items done with nothing sent")
    assert_accessible(page, "the items done with nothing sent")

    page.locator("#items .pager a", has_text="next").click()
    expect(rows).to_have_count(5)
    expect(page.locator("#show-nothing")).to_have_attribute("aria-current", "true")  # the filter stays
    page.wait_for_timeout(2_500)  # a poll of the live page keeps the filter and the page too
    expect(rows).to_have_count(5)

    page.locator("#show-sent").focus()  # by keyboard
    page.keyboard.press("Enter")
    expect(rows).to_have_count(2)
    for item in items[:2]:
        expect(page.locator(f"#item-{item.pk} .pill.e-committed").first).to_be_visible()
    page.locator("#show-failed").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("triage: bad answer")
    assert page.locator("#show-running").count() == 0, "a filter with nothing in it is not offered"
    assert page.console_errors == []
