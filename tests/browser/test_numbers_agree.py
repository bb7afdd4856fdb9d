"""The task page and Review count the same things the same way, and Resume is offered only when it would do
something, at desktop and phone width.

Before: "12 held" on the task page and "16 held" on Review for the same suspended task (Review counted its failed
items as held), and "Resume…" was offered on a task whose only unfinished item waited for an approval, where
resuming could only answer "nothing to resume"."""

import pytest
from playwright.sync_api import expect

from ticketagent.models import Item, ItemStatus, Task, TaskStatus

from ..factories import make_task
from .conftest import assert_accessible, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("width", [1400, 390])
def test_held_failed_and_resume_mean_the_same_everywhere(page, live_server, queue, alice, width):
    suspended = make_task(16, name="Suspended")
    rows = list(suspended.items.order_by("row").values_list("pk", flat=True))
    Item.objects.filter(pk__in=rows[:4]).update(status=ItemStatus.FAILED, last_error="triage: bad answer")
    Task.objects.filter(pk=suspended.pk).update(status=TaskStatus.SUSPENDED, status_reason="4 consecutive failures")
    waiting = make_task(2, name="Only an approval left", prefix="W")
    first, second = waiting.items.order_by("row")
    Item.objects.filter(pk=first.pk).update(status=ItemStatus.DONE)
    Item.objects.filter(pk=second.pk).update(status=ItemStatus.WAITING_APPROVAL)
    Task.objects.filter(pk=waiting.pk).update(status=TaskStatus.NEEDS_REVIEW)
    review = make_task(2, name="One failed", prefix="R")
    failed, done = review.items.order_by("row")
    Item.objects.filter(pk=failed.pk).update(status=ItemStatus.FAILED, attempt=3)  # requeued twice, never started
    Item.objects.filter(pk=done.pk).update(status=ItemStatus.DONE)
    Task.objects.filter(pk=review.pk).update(status=TaskStatus.NEEDS_REVIEW)

    login(page, "alice", "alice-pass-123")
    page.set_viewport_size({"width": width, "height": 900})
    # failed items: "to review" where Review counts them, "retried on resume" where a resume does
    expect(page.locator(f"#task-{review.pk} .s-failed-text")).to_have_text("failed, to review 1")
    expect(page.locator("#att-failed")).to_have_text("1 failed item to review")
    expect(page.locator(f"#task-{suspended.pk} .s-failed-text")).to_have_text("failed, retried on resume 4")
    page.goto(f"/tasks/{review.pk}/")
    expect(page.locator(f"#item-{failed.pk} td[data-label=Attempts]")).to_have_text("0")  # none ever started
    page.goto(f"/tasks/{suspended.pk}/")
    expect(page.locator("#progress [data-state=queued]")).to_have_text("held until resume 12")
    expect(page.locator("#progress [data-state=failed]")).to_have_text("failed, retried on resume 4")
    expect(page.locator("#controls #resume")).to_be_visible()
    page.goto("/review/")
    expect(page.locator(f"#suspended-{suspended.pk} .held-count")).to_have_text(
        "12 items held until a resume, 4 failed (a resume retries them)")

    page.goto(f"/tasks/{waiting.pk}/")
    expect(page.locator("#controls #resume")).to_have_count(0)
    expect(page.locator("#no-resume")).to_contain_text("Nothing to resume")
    page.locator("#no-resume a").click()
    expect(page).to_have_url(f"{live_server.url}/review/")
    assert_accessible(page, "Review")
