"""Operators see the workers and the queue: each worker's host, PID, kind, items in flight of its threads and heartbeat;
the queue's depth per task; items whose lease expired and what recovery did with them.

Before: django-rq's pages were staff-only and showed nothing of items or leases."""

import re
import signal
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from playwright.sync_api import expect
from rq.job import Job

from ticketagent.models import Item, ItemStatus
from ticketagent.scheduling import jobs
from ticketagent.scheduling.recovery import recover_once
from ticketagent.services.tasks import task_pause

from ..factories import make_task
from .conftest import assert_accessible, assert_fits_the_screen, docs_screenshot, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_an_operator_sees_each_worker_its_item_the_queue_and_the_recoveries(page, live_server, workers, sandbox,
                                                                            alice):
    sandbox.set_faults(latency_ms=1200)  # every helpdesk call takes a while: the worker is busy long enough to see
    held = make_task(3, name="Held batch", prefix="H")  # paused before any worker could take one of its items
    task_pause(task_id=held.pk, actor="alice")
    [worker] = workers.start(1, extra_env={"WORKER_THREADS": "4"})  # up to four items at once
    busy = make_task(12, name="Busy batch")  # three rounds of four: still running when a slow login gets there
    login(page, "alice", "alice-pass-123")
    page.locator("#nav-workers").click()

    row = page.locator("table.workers tbody tr").first
    expect(row).to_contain_text("in-process", timeout=30_000)  # once the worker has started (the page polls)
    expect(row).to_contain_text(f"pid {worker.pid}")
    expect(row.locator("time")).to_have_count(2)  # started, last seen
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


def test_a_killed_worker_is_shown_dead_within_the_lease_time_and_never_busy(page, live_server, workers, sandbox,
                                                                            alice):
    """Before: a SIGKILLed worker stayed "busy" on an item another worker had finished for as long as rq's key
    lived (minutes), /readyz counted it, a worker started with --name (as systemd starts them) was of kind
    "unknown", and a job lost before its item started was recovered without a line on the page."""
    sandbox.set_faults(latency_ms=3000)  # the worker is busy long enough to be killed in the middle of an item
    [worker] = workers.start(1, extra_env={"WORKER_THREADS": "2"}, args=("--name", "ticketagent-worker-1"))
    make_task(2, name="Busy batch")
    login(page, "alice", "alice-pass-123")
    page.goto("/workers/")
    row = page.locator(f"#worker-{worker.pid}")
    expect(row).to_contain_text("in-process", timeout=30_000)  # its kind, though its name says nothing of it
    expect(row).to_contain_text("busy", timeout=30_000)
    assert page.request.get("/readyz").json()["workers"] == 1

    workers.kill(worker, signal.SIGKILL)
    # dead once silent for a lease time; the page polls every 5 s
    expect(row.locator(".worker-dead")).to_have_text("dead", timeout=(settings.LEASE_SECONDS + 5 + 2) * 1000)
    expect(row).to_contain_text("s ago")
    expect(row.locator("td[data-label=State] time")).to_have_count(0)  # its silence, in seconds
    expect(row.locator("td[data-label='Last seen'] time")).to_have_count(1)  # one "last seen" per worker
    expect(row.locator(".threads")).to_have_text("0 of 2 threads busy")
    for _ in range(2):  # and it stays so, poll after poll, while rq's key lives on
        page.wait_for_timeout(5_500)
        expect(row.locator("td[data-label=State]")).not_to_contain_text("busy")
    assert page.request.get("/readyz").json()["workers"] == 0
    for width in (1400, 390):  # at a desk and on a phone
        page.set_viewport_size({"width": width, "height": 900})
        assert_accessible(page, f"the Workers page with a dead worker at {width} px")
        assert_fits_the_screen(page, f"the Workers page with a dead worker at {width} px")

    # a job lost before its item started (gone from Redis): the sweep sends it again, and the page says so
    lost = make_task(1, name="Lost batch", prefix="L")
    item = lost.items.get()
    jobs.get_queue().connection.delete(Job.key_for(jobs.job_id(item.pk, item.attempt)))
    Item.objects.filter(pk=item.pk).update(enqueued_at=timezone.now() - timedelta(hours=1))
    recover_once()
    page.reload()
    expect(page.locator(".recoveries li", has_text="L-1")).to_contain_text(
        "job lost before its item started (its job was missing from Redis) → sent again by recovery as attempt 1")
    assert page.console_errors == []


@pytest.mark.parametrize("screen", ["phone", "desktop"])
def test_the_worker_that_runs_the_recovery_sweep_is_marked_and_the_mark_moves_when_it_dies(page, live_server, workers,
                                                                                        sandbox, alice, screen):
    from .conftest import DESKTOP, PHONE

    page.set_viewport_size(PHONE if screen == "phone" else DESKTOP)
    first, second = workers.start(2, sweep=True)
    login(page, "alice", "alice-pass-123")
    page.locator("#nav-workers").click()
    marked = page.locator("table.workers tbody tr", has=page.locator(".sweeps"))
    expect(marked).to_have_count(1, timeout=60_000)  # the page polls
    holder = first if f"pid {first.pid}" in marked.inner_text() else second
    other = second if holder is first else first
    expect(marked).to_contain_text("runs the recovery sweep")
    assert_fits_the_screen(page, f"workers with a sweeping worker at {screen}")
    assert_accessible(page, f"workers with a sweeping worker at {screen}")

    workers.kill(holder, signal.SIGKILL)
    expect(page.locator(f"#worker-{other.pid} .sweeps")).to_have_count(1, timeout=60_000)
    expect(page.locator(f"#worker-{holder.pid} .sweeps")).to_have_count(0)
    assert_accessible(page, f"workers after the sweep moved, at {screen}")
