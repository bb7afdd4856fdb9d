"""Before an unknown effect's settle time, "Reconcile now" says when a look-up can answer honestly, and a click
leaves the effect unknown; a verdict by hand, with a reason, still settles it. At desktop and phone width.

Before: the button said nothing, and a click in the first minute after a gateway's 503 answered "did not happen" --
the retry it allowed could land beside the first write."""

import re

import pytest
from playwright.sync_api import expect

from ledger.models import Effect, EffectState
from tests.gate_run import effect_run
from ticketagent.eventlog.export import iso_utc
from ticketagent.models import ItemStatus
from ticketagent.plan import effect_action

from ..factories import make_task
from ..web.conftest import notify_payload
from .conftest import assert_accessible, assert_fits_the_screen, assert_keyboard_reaches_every_action, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOCAL_TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]{2,5}"  # the page's one way of writing a time (`when`)


def _unsettled(sandbox, settings) -> Effect:
    """A reply answered 503 by the helpdesk's gateway, which may still hand it on for 60 s."""
    settings.HELPDESK_UPSTREAM_TIMEOUT = 60
    task = make_task(1)
    item = task.items.get()
    sandbox.set_faults(error_next={"notify": 1}, error_status=503)
    result = effect_run(action=effect_action("notify_customer", notify_channel="helpdesk"),
                        payload=notify_payload(item), owner_task=str(task.pk), owner_item=item.ref,
                        owner_step="notify_customer", claim_token="test-worker")
    effect = Effect.objects.get(pk=result.effect.pk)
    assert effect.state == EffectState.UNKNOWN and effect.settle_after is not None
    task.items.filter(pk=item.pk).update(status=ItemStatus.WAITING_REVIEW)
    return effect


@pytest.mark.parametrize("width", [1400, 390])
def test_reconcile_now_says_when_it_can_answer_and_an_early_click_leaves_the_effect_unknown(
        page, live_server, queue, sandbox, settings, alice, width):
    effect = _unsettled(sandbox, settings)
    login(page, "alice", "alice-pass-123")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/review/")
    row = page.locator(f"#effect-{effect.pk}")
    note = row.locator(".check-from")
    expect(note).to_have_text(re.compile(
        rf"^can be checked from {LOCAL_TIME} — a request that got a 5xx or no answer may still land until then: "
        r"a look-up now can find it, but its “not found” leaves it unknown$"))
    expect(note.locator("time")).to_have_attribute("datetime", iso_utc(effect.settle_after))
    button = row.get_by_role("button", name="Reconcile now")
    expect(button).to_have_accessible_description(re.compile(r"^can be checked from "))
    assert_fits_the_screen(page, "an unknown effect before its settle time")
    assert_accessible(page, "an unknown effect before its settle time")
    assert_keyboard_reaches_every_action(page, "an unknown effect before its settle time")

    button.focus()
    page.keyboard.press("Enter")  # asked now: the helpdesk has no record of it yet, which proves nothing
    expect(row.locator(".last-reconcile")).to_contain_text(
        "the helpdesk has no record of this key — asked before its settle time, so not trusted")
    expect(row).to_have_attribute("data-state", "unknown")
    expect(row.locator(".check-from")).to_be_visible()
    effect.refresh_from_db()
    assert (effect.state, effect.verdict, effect.attempts) == (EffectState.UNKNOWN, "", 1)

    # a person who checked the helpdesk may still decide, with a reason
    row.get_by_label("verdict").select_option("not_happened")
    row.get_by_label("reason").fill("no reply on the ticket in the helpdesk, checked by hand")
    row.get_by_role("button", name="Decide").click()
    expect(row).to_have_attribute("data-state", "failed")
    expect(row.locator(".check-from")).to_have_count(0)
    effect.refresh_from_db()
    assert (effect.state, effect.resolved_by, effect.reviewed_by) == (EffectState.FAILED, "review", "alice")
    assert page.console_errors == []
