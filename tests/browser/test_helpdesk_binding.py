"""A task is bound to its helpdesk: a worker started with another helpdesk's settings takes none of its items.

The bug: two workers started from a second shell without the helpdesk settings reached the default URL, where
another system listened; drafts, replies and status changes went there and the ledger recorded them as committed
against this task's tickets. Here, with real worker processes and two sandbox helpdesks (A, the task's; B, another
on another port): a worker with B's settings takes none of the task's items and writes nothing to B (nor to A),
its log and the Workers page say why, and a worker with A's settings then completes the items."""

import pytest
from playwright.sync_api import expect

from ledger.models import Effect
from ticketagent.models import Event, EventType, ItemStatus, TaskStatus

from ..conftest import wait_for
from ..factories import make_task
from .conftest import assert_accessible, assert_fits_the_screen, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_a_worker_of_another_helpdesk_takes_none_of_the_tasks_items_and_says_why(page, live_server, workers, sandbox,
                                                                                other_sandbox, alice):
    task = make_task(4, name="Bound batch", allow_auto_close=True)
    task.refresh_from_db()
    assert task.helpdesk_id.startswith("rest|sandbox-") and task.helpdesk_url == sandbox.base_url
    other = {"HELPDESK_URL": other_sandbox.base_url, "EMAIL_PORT": "1"}  # the second shell's settings

    # a burst worker of helpdesk B: its queues hold nothing of this task, so it ends without taking an item
    assert workers.burst(extra_env=other) == 0, workers.logs()
    logs = workers.logs()
    assert f"serves rest helpdesk at {other_sandbox.base_url}" in logs, logs
    assert f"takes no items of task {task.pk} (Bound batch): it is bound to rest helpdesk at {sandbox.base_url}" \
        in logs, logs
    assert not Event.objects.filter(task=task, type=EventType.ITEM_STARTED).exists(), workers.logs()
    assert set(task.items.values_list("status", flat=True)) == {ItemStatus.QUEUED}
    assert other_sandbox.counts()["deliveries"] == 0 and sandbox.counts()["deliveries"] == 0
    assert not Effect.objects.filter(owner_task=str(task.pk)).exists()

    # a long-running one: the Workers page says which helpdesk it serves and why it takes nothing of the task
    workers.start(1, extra_env=other)
    login(page, "alice", "alice-pass-123")
    page.locator("#nav-workers").click()
    row = page.locator("table.workers tbody tr").first
    expect(row.locator(".helpdesk")).to_contain_text(f"serves rest helpdesk at {other_sandbox.base_url}", timeout=30_000)
    expect(row.locator(".not-served")).to_contain_text(
        f"takes no items of task {task.pk}: it is bound to rest helpdesk at {sandbox.base_url}")
    assert_accessible(page, "workers page, a worker of another helpdesk")
    assert_fits_the_screen(page, "workers page, a worker of another helpdesk")
    assert not Event.objects.filter(task=task, type=EventType.ITEM_STARTED).exists(), workers.logs()

    # a worker with A's settings completes the items; B never received anything
    workers.start(1)
    wait_for(lambda: task.__class__.objects.get(pk=task.pk).status == TaskStatus.COMPLETED, timeout=180,
             message=lambda: f"the task to complete\n{workers.logs()}")
    assert set(task.items.values_list("status", flat=True)) == {ItemStatus.DONE}
    assert sandbox.counts()["deliveries"] > 0
    assert other_sandbox.counts()["deliveries"] == 0, other_sandbox.deliveries()
