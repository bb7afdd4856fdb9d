"""What an operator sees of the helpdesk: a task waiting for it ("Waiting for the helpdesk since …", nothing to do),
and an item the helpdesk refused, in words ("Refused by the helpdesk"), on the item page and on Review; at desktop
and phone width, axe clean.

Before: a helpdesk that kept failing failed items as `channel_refused` and suspended their task; nothing said the
task was waiting for it."""

import time

import pytest
from playwright.sync_api import expect

from ticketagent.channels.waiting import channel_governor
from ticketagent.models import ItemStatus, TaskStatus
from ticketagent.pipeline.run import item_process

from ..factories import make_task
from .conftest import assert_accessible, assert_fits_the_screen, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def helpdesk_down() -> None:
    """What a call that found the helpdesk unavailable tells every worker."""
    turn = channel_governor("helpdesk").take(give_up=time.monotonic() + 5)
    turn.unreachable()
    turn.release()


@pytest.mark.parametrize("width", [1400, 390])
def test_a_task_waiting_for_the_helpdesk_and_an_item_it_refused_say_so(page, live_server, queue, sandbox, alice,
                                                                       width):
    sandbox.set_faults(error_status=404, error_rate={"draft": 1.0})
    refused = make_task(1, name="Refused", prefix="R", failure_threshold=2)
    item = refused.items.get()
    assert item_process(item_id=item.pk, attempt=item.attempt).startswith("failed")
    item.refresh_from_db()
    refused.refresh_from_db()
    assert (item.status, item.failure_kind, refused.status) == (ItemStatus.FAILED, "helpdesk_refused",
                                                                TaskStatus.NEEDS_REVIEW)
    waiting = make_task(2, name="Waiting", prefix="W")
    helpdesk_down()

    login(page, "alice", "alice-pass-123")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/tasks/{waiting.pk}/")
    wait = page.locator(".channel-wait")
    expect(wait).to_have_count(1)
    expect(wait).to_contain_text("Waiting for the helpdesk since")
    expect(wait).to_contain_text("items wait and go on by themselves once it answers; none fails for it")
    assert_fits_the_screen(page, "a task waiting for the helpdesk")
    assert_accessible(page, "a task waiting for the helpdesk")

    page.goto(f"/items/{item.pk}/")
    expect(page.locator(".failure-kind")).to_have_text("Refused by the helpdesk:")
    assert_fits_the_screen(page, "an item the helpdesk refused")
    assert_accessible(page, "an item the helpdesk refused")

    page.goto("/review/")
    row = page.locator(f"#failed-{item.pk}")
    expect(row.locator(".failure-kind")).to_have_text("Refused by the helpdesk")
    expect(row).to_contain_text("save_draft: helpdesk refused with 404")
    assert_fits_the_screen(page, "Review's failed items")
    assert_accessible(page, "Review's failed items")

    page.goto(f"/tasks/{refused.pk}/")  # a task that waits on a person, not on the helpdesk
    expect(page.locator(".channel-wait")).to_have_count(0)
