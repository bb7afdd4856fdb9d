"""A lead reads a published playbook's rules and facts on its version page, at 390 and 1400 px, by keyboard.

The Kestrel example (docs/examples/playbook-kestrel.yaml) has rules of every kind: a priority table, any-of and
none-of conditions, money comparisons, escalation queues, no reply, holds with a reason. Before, the page said
only "When {when} → forbid/require/hold": "Rule 10: safety is always urgent: When category is safety → " and
"Rule 3 …: When  → ", and it had no facts or word lists at all."""

import pytest
from playwright.sync_api import expect

from ticketagent.playbooks.files import spec_from_file
from ticketagent.playbooks.services import playbook_import

from ..conftest import ROOT
from .conftest import (
    DESKTOP,
    PHONE,
    assert_accessible,
    assert_fits_the_screen,
    assert_keyboard_reaches_every_action,
    login,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _rule(page, name: str):
    return page.locator("ol.rules li.rule", has_text=name)


@pytest.mark.parametrize("screen", [PHONE, DESKTOP], ids=["390px", "1400px"])
def test_every_rule_reads_whole_and_the_facts_are_listed(page, live_server, alice, screen):
    version = playbook_import(data=spec_from_file(ROOT / "docs/examples/playbook-kestrel.yaml"), publish=True)
    page.set_viewport_size(screen)
    login(page, "alice", "alice-pass-123")
    page.goto(f"/playbooks/versions/{version.pk}/")

    facts = page.locator("#facts summary", has_text="Read the facts and word lists")
    facts.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#facts details.view")).to_have_attribute("open", "")
    total = page.locator("table.facts tr", has_text="order_total")
    expect(total).to_contain_text("money")
    expect(total).to_contain_text("the ticket's field order_total")
    expect(page.locator("table.facts tr", has_text="plan")).to_contain_text("one of care, regular")
    expect(page.locator("dl.word-lists")).to_contain_text("swollen battery")

    rules = page.locator("#rules summary", has_text="Read the")
    rules.focus()
    page.keyboard.press("Enter")
    expect(_rule(page, "Rule 10: safety is always urgent")).to_contain_text("When category is safety → priority urgent")
    expect(_rule(page, "Rule 3: reseller bots are spam")).to_contain_text(
        "When any of (ticket.customer_email mentions reseller_bots; ticket.customer_email ends with "
        "@bikeflip.example.com) → category spam")
    expect(_rule(page, "Rule 6: spam words")).to_contain_text("and none of (order_id is given)")
    expect(_rule(page, "Rule 11:")).to_contain_text("priority at least high")
    expect(_rule(page, "Rule 19:")).to_contain_text("no reply; forbid set_status, escalate; require close_ticket")
    returns = _rule(page, "Rule 25:")
    expect(returns).to_contain_text("any of (order_total > 400 EUR; order_total > 450 USD)")
    expect(returns).to_contain_text("hold notify_customer for approval (a team lead approves returns")
    expect(returns).to_contain_text("escalate to RT queue returns-approval")
    # no rule reads empty on either side of the arrow
    for sentence in page.locator("ol.rules li.rule .sentence").all_inner_texts():
        when, _, then = sentence.partition("→")
        assert when.strip() not in ("", "When") and then.strip(), sentence

    where = f"Kestrel v{version.number} at {screen['width']} px"
    assert_fits_the_screen(page, where)
    assert_accessible(page, where)
    assert_keyboard_reaches_every_action(page, where)
