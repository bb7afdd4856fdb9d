"""Review's live refresh never undoes what an operator is doing.

Before: the page's guard stopped a refresh only before its request started. A refresh already in flight when the
operator began ticking rows swapped the whole list in when it answered: the ticks and the typed reason were gone,
and "Approve selected" approved fewer items than the operator had chosen (1 of 3 at 1280 px, none at 390 px).
Here the refresh is held in flight (the browser's own request, answered late) while the operator ticks and types.
"""

import re

import pytest
from playwright.sync_api import expect

from ticketagent.models import Event, EventType, ItemStatus
from ticketagent.pipeline.run import item_process

from ..factories import make_task
from .conftest import assert_accessible, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]

POLL = re.compile(r"/review/\?seen=")


@pytest.mark.parametrize("width", [1280, 390])
def test_a_refresh_in_flight_keeps_the_ticks_and_the_reason_and_all_the_ticked_are_approved(
        page, live_server, queue, sandbox, alice, width):
    task = make_task(4, name="Close requests", prefix="C", subject="All good now",
                     body="It works again, thank you. You can close this ticket.")
    items = list(task.items.order_by("row"))
    for item in items:  # the offline model asks to close: held for an operator
        assert item_process(item_id=item.pk, attempt=item.attempt).startswith("waiting")
    login(page, "alice", "alice-pass-123")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/review/")

    first = page.locator(f"#approval-{items[0].pk}")
    first.get_by_label("reason").fill("confirmed by phone")
    first.get_by_role("button", name="Approve", exact=True).click()
    expect(first).to_contain_text("approved by alice")

    held = []  # the next refresh: sent by the page, answered only when the test lets it
    page.route(POLL, lambda route: held.append(route))
    page.evaluate("""() => { window.refreshes = 0;  // answers of the refresh that reach the page
        document.addEventListener('htmx:beforeSwap', e => {
            if (e.detail.elt.id === 'review-live') window.refreshes += 1; }); }""")
    for _ in range(300):
        if held:
            break
        page.wait_for_timeout(100)
    assert held, "the page's live refresh never started"

    for item in items[1:]:  # the operator works while that refresh is in flight
        page.locator(f"#pick-{item.pk}").check()
    page.locator("#bulk-reason").fill("The customers confirmed it works")
    held[0].continue_()
    page.wait_for_function("() => window.refreshes >= 1", timeout=60_000)
    page.wait_for_timeout(500)  # a swap, had there been one, has happened by now

    for item in items[1:]:
        expect(page.locator(f"#pick-{item.pk}")).to_be_checked()
    expect(page.locator("#bulk-reason")).to_have_value("The customers confirmed it works")
    expect(page.locator("#review-live-paused")).to_be_visible()
    assert_accessible(page, "review with its live updates waiting for the operator's form")

    page.unroute(POLL)
    for route in held[1:]:
        route.continue_()
    page.locator("#bulk-approvals").get_by_role("button", name="Approve selected").click()
    expect(page.locator("#bulk-result")).to_have_text("Approved 3: C-2, C-3, C-4.")
    approved = Event.objects.filter(type=EventType.APPROVED).values_list("item_id", flat=True)
    assert sorted(approved) == sorted(i.pk for i in items)
    assert not task.items.filter(status=ItemStatus.WAITING_APPROVAL).exists()
    expect(page.locator("#review-live-paused")).to_be_hidden(timeout=30_000)  # the next refresh runs again
