"""(b) The model server fails (HTTP 503), the task suspends by itself; once
the server is back, an operator resumes it from the task page: Resume opens
the dry-run in place, Confirm enqueues, the task finishes. The page was
opened while the task was still running and was never reloaded.

The model answers after the recovery carry markup; it stays text."""

import pytest
from playwright.sync_api import expect

from ticketagent.models import Event, EventType, TaskStatus
from ticketagent.services.upload import task_upload

from ..factories import csv_batch
from .conftest import assert_no_alerts, assert_same_page, login, mark_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]

EVIL_REPLY = {"subject": "Re: your refund <img src=x onerror=\"alert('model')\">",
              "body": "<script>alert('model')</script> <a href=\"javascript:alert('model')\">details</a>"}


def test_a_suspended_task_is_resumed_through_the_dry_run(page, live_server, workers, sandbox, openai_server, alice):
    # a model API that rejects every request needs a person (an outage or a rate limit only waits)
    openai_server.configure(mode="400")
    workers.start(1, extra_env=openai_server.worker_env)
    workers.start_recovery()
    login(page, "alice", "alice-pass-123")
    task = task_upload(data=csv_batch(5), filename="model-down.csv", user=alice, failure_threshold=3)
    page.goto(f"/tasks/{task.pk}/")
    mark_page(page)

    # three failed items in a row suspend the task; the page learns it by polling
    expect(page.locator("#task-status")).to_have_text("suspended", timeout=30_000)
    expect(page.locator("#status-reason")).to_contain_text("3 consecutive failures: model rejected the request")
    resume = page.locator("#controls #resume")
    expect(resume).to_be_visible()  # the actions came along with the status change
    assert openai_server.by_behaviour["400"] >= 3

    # the model server recovers
    openai_server.configure(mode="valid", answers={"Reply": EVIL_REPLY})
    resume.click()
    dry_run = page.locator("#dry-run")
    expect(dry_run).to_contain_text("Dry-run: what resuming will do")
    expect(dry_run.locator("[data-category=recompute]")).to_have_text("recompute 5")
    confirm = page.locator("#confirm-resume")
    expect(confirm).to_have_text("Confirm resume (5 items)")
    task.refresh_from_db()
    assert task.status == TaskStatus.SUSPENDED and task.resume_count == 0, "the dry-run changed nothing"

    confirm.click()
    expect(page.locator("#controls")).to_contain_text("Resumed: 5 items enqueued.")
    expect(page.locator("#percent")).to_have_text("100%", timeout=30_000)
    expect(page.locator("#task-status")).to_have_text("completed")
    assert_same_page(page)

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED and task.resume_count == 1
    assert Event.objects.filter(task=task, type=EventType.RESUMED, actor="alice").count() == 1
    assert sandbox.counts()["duplicates"] == 0

    # the resume is counted on the dashboard; the model's markup is text on the item page
    page.goto("/")
    expect(page.locator("#tile-resumes b")).to_have_text("1")
    page.goto(f"/items/{task.items.order_by('row').first().pk}/")
    expect(page.locator("#checkpoint")).to_contain_text("<script>alert('model')</script>")
    assert page.locator("img[src=x]").count() == 0 and page.locator("a[href^='javascript:']").count() == 0
    assert_no_alerts(page)
    assert page.console_errors == []


def test_pause_and_cancel_update_the_page_in_place_and_errors_show_inline(page, live_server, queue, alice):
    task = task_upload(data=csv_batch(2), filename="idle.csv", user=alice)  # no workers: it stays queued
    login(page, "alice", "alice-pass-123")
    page.goto(f"/tasks/{task.pk}/")
    mark_page(page)

    page.locator("#pause").click()
    expect(page.locator("#controls")).to_contain_text("Paused")
    expect(page.locator("#task-status")).to_have_text("paused")  # the progress came along out of band
    expect(page.locator("#resume")).to_be_visible()

    page.locator("#cancel").click()  # hx-confirm: the page fixture accepts the dialog
    expect(page.locator("#task-status")).to_have_text("cancelled")
    expect(page.locator("#controls")).to_contain_text("Cancelled")
    expect(page.locator("#controls button")).to_have_count(0)
    assert page.locator("#progress").get_attribute("hx-get") is None, "a final task is not polled"
    assert [d[0] for d in page.dialogs] == ["confirm"]

    # an action that no longer applies answers 409; its error is shown in place
    page.evaluate("(url) => htmx.ajax('POST', url, {target: '#controls', swap: 'outerHTML'})",
                  f"/tasks/{task.pk}/pause/")
    expect(page.locator("#controls [role=alert]")).to_contain_text("only a queued or running task can be paused")
    assert_same_page(page)
    task.refresh_from_db()
    assert task.status == TaskStatus.CANCELLED
    assert list(Event.objects.filter(task=task, actor="alice").values_list("type", flat=True)) == [
        EventType.TASK_CREATED, EventType.PLANNED, EventType.PAUSED, EventType.CANCELLED,
        EventType.ITEM_SKIPPED, EventType.ITEM_SKIPPED]  # the cancel skipped both queued items
