"""The task page is live from one poll: progress, items table, timeline and
resume count update together, and the poll stops when the task is final.

Before: the timeline never refreshed; "resumed 0×" stayed after a resume until
a reload; the progress bar (2 s) and the items table (3 s) refreshed apart and
disagreed. Timeline entries named items by database id ("item #65"), and a
suspended task's last successful item too ("#49")."""

import re

import pytest
from playwright.sync_api import expect

from ticketagent.models import Item, ItemStatus, Task, TaskStatus
from ticketagent.pipeline.run import item_process
from ticketagent.services.resume import task_resume
from ticketagent.services.tasks import task_pause

from ..factories import make_task
from .conftest import assert_accessible, assert_same_page, login, mark_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_progress_items_timeline_and_resume_count_move_together(page, live_server, queue, sandbox, alice):
    task = make_task(2, name="Live batch")
    first, second = task.items.order_by("row")
    login(page, "alice", "alice-pass-123")
    polls = []
    page.on("response", lambda r: "/progress/" in r.url and polls.append(r.status))
    page.goto(f"/tasks/{task.pk}/")
    mark_page(page)
    assert page.locator("main [hx-trigger]").count() == 1, "one poll for the whole task page"
    # nothing changed yet: the poll answers 204 and nothing is rendered
    page.wait_for_event("response", lambda r: "/progress/" in r.url and r.status == 204)

    assert item_process(item_id=first.pk, attempt=first.attempt) == "done"  # a worker's work, in this process
    expect(page.locator(f"#item-{first.pk}")).to_have_attribute("data-status", "done")
    expect(page.locator("#percent")).to_have_text("50%")
    expect(page.locator("#timeline")).to_contain_text("item done T-1")
    expect(page.locator("#timeline")).not_to_contain_text(f"#{first.pk}")
    # the counts above the table and the rows below it come from the same answer
    done_rows = page.locator("table.items tr[data-status=done]").count()
    assert re.search(rf"{done_rows} / 2 ended", page.locator("#progress").inner_text())

    task_pause(task_id=task.pk, actor="bob")  # another operator, elsewhere
    expect(page.locator("#task-status")).to_have_text("paused")
    task_resume(task_id=task.pk, actor="bob")
    expect(page.locator("#resume-count")).to_have_text("resumed 1×")
    expect(page.locator("#timeline")).to_contain_text("resumed")
    expect(page.locator("#timeline li").first).to_contain_text("T-2")  # its ITEM_REQUEUED, by ticket

    second.refresh_from_db()
    assert item_process(item_id=second.pk, attempt=second.attempt) == "done"
    expect(page.locator("#task-status")).to_have_text("completed")
    expect(page.locator("#percent")).to_have_text("100%")
    expect(page.locator(f"#item-{second.pk}")).to_have_attribute("data-status", "done")
    assert page.locator("#progress").get_attribute("hx-get") is None, "a final task is not polled"
    assert_same_page(page)
    assert polls[0] == 204 and polls[-1] == 286, f"idle polls answer 204 and the last one 286: {polls}"


def test_a_suspended_task_names_its_last_successful_item_by_ticket(page, live_server, operator_world, alice):
    task = operator_world["suspended"]
    login(page, "alice", "alice-pass-123")
    page.goto(f"/tasks/{task.pk}/")
    last = page.locator("#last-success")
    expect(last).to_have_text("last successful item: T-1")
    first = task.items.order_by("row").first()
    expect(last.get_by_role("link", name="T-1")).to_have_attribute("href", f"/items/{first.pk}/")
    assert f"#{first.pk}" not in page.locator("#progress").inner_text()


def test_the_task_page_shows_the_running_count_of_consecutive_failures(page, live_server, queue, alice):
    task = make_task(4, name="Flaky", failure_threshold=3)
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.RUNNING, consecutive_failures=2)
    login(page, "alice", "alice-pass-123")
    page.goto(f"/tasks/{task.pk}/")
    counter = page.locator("#failure-count")
    expect(counter).to_contain_text("2 of 3 consecutive failures")
    expect(counter).to_contain_text("in the order they finish, across all workers")


@pytest.mark.parametrize("width", [1400, 390])
def test_a_change_that_writes_no_event_still_reaches_the_open_page_and_the_review_count_is_live(
        page, live_server, queue, alice, width):
    """Before: after Pause the open page showed "running 2" until reloaded -- its poll's cursor was the last event
    id, and the items' hand-back changed their status without a new event -- and the header's "Review N" stayed
    as it was while the attention bar beside it moved."""
    task = make_task(3, name="Paused with items in flight")
    first, second, _ = task.items.order_by("row")
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.RUNNING)
    Item.objects.filter(pk__in=(first.pk, second.pk)).update(status=ItemStatus.RUNNING)
    login(page, "alice", "alice-pass-123")
    page.set_viewport_size({"width": width, "height": 900})
    polls = []
    page.on("response", lambda r: "/progress/" in r.url and polls.append(r.status))
    page.goto(f"/tasks/{task.pk}/")
    mark_page(page)
    expect(page.locator("#progress [data-state=running]")).to_have_text("running 2")
    page.wait_for_event("response", lambda r: "/progress/" in r.url)
    assert polls[0] == 204, "the page carries the digest of what it shows: the first poll finds nothing new"

    task_pause(task_id=task.pk, actor="bob")
    expect(page.locator("#task-status")).to_have_text("paused")
    # the items handed back by their workers: a status written with no event of the task's
    Item.objects.filter(pk__in=(first.pk, second.pk)).update(status=ItemStatus.QUEUED)
    expect(page.locator("#progress [data-state=running]")).to_have_count(0)
    expect(page.locator(f"#item-{first.pk}")).to_have_attribute("data-status", "queued")

    expect(page.locator("#nav-review-count")).to_be_hidden()
    Item.objects.filter(pk=first.pk).update(status=ItemStatus.WAITING_APPROVAL)  # an approval, elsewhere
    expect(page.locator("#nav-review-count")).to_have_text("1", timeout=10_000)
    expect(page.locator("#att-approvals")).to_contain_text("1 approval waiting")
    assert_same_page(page)
    assert_accessible(page, "the task page after a change without an event")
