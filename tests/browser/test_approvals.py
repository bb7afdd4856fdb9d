"""Approvals with their context, and several decided at once, at desktop and phone width.

Before: an approval row showed neither the agent's reason nor the customer's words nor the draft -- 14 approvals
meant 14 item pages -- and each had to be decided alone."""

import pytest
from playwright.sync_api import expect

from ticketagent.models import Event, EventType, ItemStatus
from ticketagent.pipeline.run import item_process

from ..factories import make_task
from .conftest import assert_accessible, assert_fits_the_screen, assert_keyboard_reaches_every_action, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("width", [1400, 390])
def test_each_approval_shows_why_the_words_and_the_draft_and_several_are_decided_with_one_reason(
        page, live_server, queue, sandbox, alice, width):
    task = make_task(3, name="Close requests", prefix="C", subject="All good now",
                     body="It works again, thank you. You can close this ticket.")
    items = list(task.items.order_by("row"))
    for item in items:  # the offline model answers, then asks to close: held for an operator
        assert item_process(item_id=item.pk, attempt=item.attempt).startswith("waiting")
    assert {i.status for i in task.items.all()} == {ItemStatus.WAITING_APPROVAL}

    login(page, "alice", "alice-pass-123")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/review/")
    first = page.locator(f"#approval-{items[0].pk}")
    expect(first.locator(".agent-reason")).to_have_text("The agent's reason: the customer asked to close the ticket")
    expect(first.locator(".held")).to_contain_text("close_ticket")
    expect(first).to_contain_text("waiting since")
    assert_keyboard_reaches_every_action(page, "the approvals with their context")
    first.locator(".ticket-words summary").click()
    expect(first.locator(".ticket-words pre")).to_have_text("It works again, thank you. You can close this ticket.")
    first.locator(".draft-reply summary").click()
    expect(first.locator(".draft-reply pre")).to_contain_text("All good now", ignore_case=True)
    assert_fits_the_screen(page, "the approvals with their context")
    assert_accessible(page, "the approvals with their context")

    bulk = page.locator("#bulk-approvals")
    bulk.get_by_role("button", name="Approve selected").click()  # nothing selected, no reason: refused
    page.locator("#bulk-reason").fill("The customers confirmed it works")
    bulk.get_by_role("button", name="Approve selected").click()
    expect(page.locator("#bulk-errors")).to_have_text("select the items to decide first")
    assert not Event.objects.filter(type=EventType.APPROVED).exists()

    page.locator(f"#pick-{items[0].pk}").check()
    page.locator(f"#pick-{items[2].pk}").check()
    page.locator("#bulk-reason").fill("The customers confirmed it works")
    bulk.get_by_role("button", name="Approve selected").click()
    expect(page.locator("#bulk-result")).to_have_text("Approved 2: C-1, C-3.")
    expect(page.locator(f"#approval-{items[0].pk}")).to_have_count(0)
    expect(page.locator(f"#approval-{items[1].pk}")).to_be_visible()  # not selected: still waits
    approved = Event.objects.filter(type=EventType.APPROVED).order_by("item_id")
    assert [(e.item_id, e.actor, e.payload["reason"]) for e in approved] == [
        (items[0].pk, "alice", "The customers confirmed it works"),
        (items[2].pk, "alice", "The customers confirmed it works")]  # each decision audited on its own
    expect(page.locator(".audit")).to_contain_text("C-3")

    # the last one by keyboard, on its own row: the focus stays with the answer, not at the top of the page
    last = page.locator(f"#approval-{items[1].pk}")
    last.get_by_label("reason").focus()
    page.keyboard.type("Confirmed on the phone")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")  # Approve
    expect(last.locator(".status")).to_have_text("approved")
    # on the answer in its row (once the swap has settled) -- or, once the live list has let the decided row go,
    # on the list around it; never back at the top of the page
    page.wait_for_function(f"() => !!document.activeElement.closest('#approval-{items[1].pk}, #approvals')",
                           timeout=5_000)
    assert page.console_errors == []
