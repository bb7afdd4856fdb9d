"""Operators see the workers and the queue: each worker's host, PID, kind, items in flight of its threads and heartbeat;
the queue's depth per task; items whose lease expired and what recovery did with them.

Before: django-rq's pages were staff-only and showed nothing of items or leases."""

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from ticketagent.models import Item, ItemStatus, Task, TaskStatus
from ticketagent.recovery import recover_once

from ..factories import make_task
from .conftest import docs_screenshot, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_an_operator_sees_each_worker_its_item_the_queue_and_the_recoveries(page, live_server, workers, sandbox,
                                                                            alice):
    sandbox.set_faults(latency_ms=1200)  # every helpdesk call takes a while: the worker is busy long enough to see
    [worker] = workers.start(1, extra_env={"WORKER_THREADS": "4"})  # up to four items at once
    held = make_task(3, name="Held batch", prefix="H")
    Task.objects.filter(pk=held.pk).update(status=TaskStatus.PAUSED, status_reason="paused by alice")
    busy = make_task(4, name="Busy batch")
    login(page, "alice", "alice-pass-123")
    page.locator("#nav-workers").click()

    row = page.locator("table.workers tbody tr").first
    expect(row).to_contain_text("in-process", timeout=30_000)  # once the worker has started (the page polls)
    expect(row).to_contain_text(f"pid {worker.pid}")
    expect(row.locator("time")).to_have_count(2)  # started, last heartbeat
    expect(row).to_contain_text("T-", timeout=30_000)  # its current item, by ticket (the page polls)
    expect(row).to_contain_text(f"task {busy.pk}")
    expect(row.locator(".threads")).to_have_text(re.compile(r"^[1-4] of 4 threads busy$"))
    expect(page.locator(f"#depth-{held.pk}")).to_contain_text("3 held: the task is paused")

    # a lease nobody renews: shown as expired, then taken over by the sweep and requeued
    stuck = held.items.order_by("row").first()
    Item.objects.filter(pk=stuck.pk).update(status=ItemStatus.RUNNING, lease_owner="gone-host:4242",
                                            lease_token="dead", lease_expires_at=timezone.now())
    page.reload()
    expect(page.locator(f"#lease-{stuck.pk}")).to_contain_text("gone-host:4242")
    expect(page.locator(f"#lease-{stuck.pk}")).to_contain_text("expired")
    recover_once()
    recovered = page.locator(".recoveries li", has_text="H-1")
    expect(recovered).to_contain_text("lease of gone-host:4242 taken over by recovery (lease expired)", timeout=15_000)
    expect(recovered).to_contain_text("requeued as attempt 2")
    docs_screenshot(page.locator("main"), "workers")
