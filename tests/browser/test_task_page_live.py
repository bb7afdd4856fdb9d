"""The task page is live from one poll: progress, items table, timeline and
resume count update together, and the poll stops when the task is final.

Before: the timeline never refreshed; "resumed 0×" stayed after a resume until
a reload; the progress bar (2 s) and the items table (3 s) refreshed apart and
disagreed. Timeline entries named items by database id ("item #65"), and a
suspended task's last successful item too ("#49")."""

import re

import pytest
from playwright.sync_api import expect

from ticketagent.models import Task, TaskStatus
from ticketagent.pipeline.run import item_process
from ticketagent.services.resume import task_resume
from ticketagent.services.tasks import task_pause

from ..factories import make_task
from .conftest import assert_same_page, login, mark_page

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
    expect(page.locator("#timeline")).to_contain_text("ITEM_DONE T-1")
    expect(page.locator("#timeline")).not_to_contain_text(f"#{first.pk}")
    # the counts above the table and the rows below it come from the same answer
    done_rows = page.locator("table.items tr[data-status=done]").count()
    assert re.search(rf"{done_rows} / 2 ended", page.locator("#progress").inner_text())

    task_pause(task_id=task.pk, actor="bob")  # another operator, elsewhere
    expect(page.locator("#task-status")).to_have_text("paused")
    task_resume(task_id=task.pk, actor="bob")
    expect(page.locator("#resume-count")).to_have_text("resumed 1×")
    expect(page.locator("#timeline")).to_contain_text("RESUMED")
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
