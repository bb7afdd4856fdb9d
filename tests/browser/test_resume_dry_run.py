"""Resume, as an operator meets it.

Before: on a task whose only open item waited for approval, Resume offered
"Confirm resume (0 items)", and confirming said "Resumed: 0 items enqueued."
and counted a resume. After "Confirm resume" under a long dry-run the page
stayed scrolled down and the confirmation was off-screen."""

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from ticketagent.models import Event, EventType, Item, ItemStatus, Task, TaskStatus

from ..factories import make_task
from .conftest import assert_same_page, login, mark_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_a_resume_that_would_enqueue_nothing_is_neither_offered_nor_counted(page, live_server, queue, alice):
    task = make_task(2, name="Waiting for a close")
    first, second = task.items.order_by("row")
    Item.objects.filter(pk=first.pk).update(status=ItemStatus.DONE, finished_at=timezone.now())
    Item.objects.filter(pk=second.pk).update(status=ItemStatus.WAITING_APPROVAL)
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.NEEDS_REVIEW)
    login(page, "alice", "alice-pass-123")
    page.goto(f"/tasks/{task.pk}/")
    mark_page(page)

    expect(page.locator("#resume")).to_have_count(0)  # not offered: it could only answer "nothing to resume"
    nothing = page.locator("#no-resume")
    expect(nothing).to_contain_text("Nothing to resume")
    expect(nothing.get_by_role("link")).to_have_attribute("href", "/review/")
    # the dry-run, asked for anyway, says why
    page.goto(f"/tasks/{task.pk}/dry-run/")
    nothing = page.locator("#nothing-to-resume")
    expect(nothing).to_contain_text("1 item waiting for approval")
    expect(page.locator("#confirm-resume")).to_have_count(0)
    expect(nothing.get_by_role("link", name="Review")).to_have_attribute("href", "/review/")
    mark_page(page)

    # forced anyway: refused on the server, not counted
    page.evaluate("(url) => htmx.ajax('POST', url, {target: '#controls', swap: 'outerHTML'})",
                  f"/tasks/{task.pk}/resume/")
    expect(page.locator("#controls [role=alert]")).to_contain_text("nothing to resume")
    assert_same_page(page)
    task.refresh_from_db()
    assert task.resume_count == 0 and task.status == TaskStatus.NEEDS_REVIEW
    assert not Event.objects.filter(task=task, type=EventType.RESUMED).exists()
    expect(page.locator("#resume-count")).to_have_text("resumed 0×")


def test_after_confirm_resume_the_confirmation_is_on_screen(page, live_server, queue, alice):
    task = make_task(60, name="A long dry-run")
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.SUSPENDED, status_reason="3 consecutive failures: x")
    login(page, "alice", "alice-pass-123")
    page.set_viewport_size({"width": 1200, "height": 700})
    page.goto(f"/tasks/{task.pk}/")
    page.locator("#resume").click()
    confirm = page.locator("#confirm-resume")
    expect(confirm).to_have_text("Confirm resume (60 items)")
    expect(confirm).to_be_in_viewport()  # before the dry-run's 60 rows, not 6,000 px below them
    confirm.focus()
    page.keyboard.press("Enter")
    message = page.locator("#controls [role=status]")
    expect(message).to_have_text("Resumed: 60 items enqueued.")
    expect(message).to_be_in_viewport()
    expect(message).to_be_focused()  # the focus goes to the answer, not back to the top of the page
    expect(page.locator("#resume-count")).to_have_text("resumed 1×")
    expect(page.locator("#task-status")).to_have_text("running")
