"""Rejecting a held reply in the browser: the review form's two choices, by keyboard, at desktop and phone width,
and the item page saying which was chosen (who, when, why) and what did not run because of it.

Before: the form had one Reject button, and a rejected reply still set the ticket to waiting for the customer."""

import pytest
from playwright.sync_api import expect

from ticketagent.models import Approval, EventType, ItemStatus
from ticketagent.pipeline.run import item_process
from ticketagent.playbooks.services import playbook_import, version_publish
from ticketagent.playbooks.standard import standard_spec

from ..factories import make_task
from .conftest import assert_accessible, assert_fits_the_screen, assert_keyboard_reaches_every_action, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]

URGENT_REPLIES = {"name": "Urgent replies need a person", "when": ["priority is urgent"], "approve": ["notify_customer"]}


def delivered(sandbox) -> dict:
    return {endpoint: n for endpoint, n in sandbox.counts()["by_endpoint"].items() if n}


@pytest.mark.parametrize("width", [1400, 390])
def test_a_held_reply_is_rejected_doing_the_rest_or_stopping_the_item(page, live_server, queue, sandbox,
                                                                      openai_server, alice, width):
    data = {**standard_spec().model_dump(mode="json"), "name": "Team rules", "rules": [URGENT_REPLIES]}
    version = version_publish(version_id=playbook_import(data=data).pk)
    openai_server.configure(answers={"Decision": {
        "actions": ["save_draft", "notify_customer", "set_status", "escalate"], "status": "pending",
        "reason": "answered; a person should follow up"}})
    task = make_task(2, name="Urgent", prefix="U", priority="urgent", playbook_version=version)
    rest, stop = task.items.order_by("row")
    for item in (rest, stop):  # the draft is saved, then the reply waits for a person
        assert item_process(item_id=item.pk, attempt=item.attempt).startswith("waiting")
    assert delivered(sandbox) == {"draft": 2}

    login(page, "alice", "alice-pass-123")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/review/")
    row = page.locator(f"#approval-{rest.pk}")
    expect(row.get_by_role("button", name="Reject the reply, do the rest")).to_be_visible()
    expect(row.get_by_role("button", name="Reject the reply, stop the item")).to_be_visible()
    hint = row.locator(".rest-hint")
    expect(hint).to_contain_text("Do the rest: runs escalate; not notify_customer (rejected), set_status (status "
                                 "pending (waiting for the customer) follows a reply, and the reply was rejected).")
    expect(hint).to_contain_text("Stop the item: it is skipped, with your reason; nothing more of it runs.")
    assert_fits_the_screen(page, "the approvals with both ways to reject")
    assert_accessible(page, "the approvals with both ways to reject")
    assert_keyboard_reaches_every_action(page, "the approvals with both ways to reject")

    # by keyboard: the reason, then past Approve to "do the rest"
    row.get_by_label("reason").focus()
    page.keyboard.type("I will call the customer")
    page.keyboard.press("Tab")  # Approve
    page.keyboard.press("Tab")  # Reject the reply, do the rest
    page.keyboard.press("Enter")
    expect(row.locator(".status")).to_have_text("rejected, the rest done")
    rest.refresh_from_db()
    assert (rest.approval, rest.approval_by, rest.status) == (Approval.REJECTED, "alice", ItemStatus.QUEUED)

    other = page.locator(f"#approval-{stop.pk}")
    other.get_by_role("button", name="Reject the reply, stop the item").click()  # no reason: the form will not send
    assert other.get_by_label("reason").evaluate("(el) => el.validity.valueMissing")
    stop.refresh_from_db()
    assert stop.status == ItemStatus.WAITING_APPROVAL and not stop.approval
    other.get_by_label("reason").fill("Wrong customer: handled by phone")
    other.get_by_role("button", name="Reject the reply, stop the item").click()
    expect(other.locator(".status")).to_have_text("rejected, the item stopped")
    stop.refresh_from_db()
    assert (stop.approval, stop.status) == (Approval.STOPPED, ItemStatus.SKIPPED)
    expect(page.locator(".audit")).to_contain_text("notify_customer rejected (the item stopped) by alice")

    assert item_process(item_id=rest.pk, attempt=rest.attempt) == "done"
    assert delivered(sandbox) == {"draft": 2, "escalate": 1}, "no reply, no pending status; the escalation ran"
    assert not stop.events.filter(type=EventType.ITEM_REQUEUED).exists()

    page.goto(f"/items/{rest.pk}/")
    decision = page.locator("#approval-decision")
    expect(decision).to_contain_text("rejected, the rest done by alice")
    expect(decision).to_contain_text("I will call the customer")
    expect(decision.locator("time")).to_have_count(1)  # when
    not_run = page.locator("#d-not-run")
    expect(not_run).to_contain_text("notify_customer: notify_customer rejected by alice")
    expect(not_run).to_contain_text("set_status: not run: status pending (waiting for the customer) follows a reply")
    assert_fits_the_screen(page, "an item done without its rejected reply")
    assert_accessible(page, "an item done without its rejected reply")

    page.goto(f"/items/{stop.pk}/")
    expect(page.locator("#item-status")).to_have_text("skipped")
    expect(page.locator("#approval-decision")).to_contain_text(
        "rejected, the item stopped by alice")
    expect(page.locator("#approval-decision")).to_contain_text("Wrong customer: handled by phone")
    assert_accessible(page, "an item stopped by a rejection")
    assert page.console_errors == []
