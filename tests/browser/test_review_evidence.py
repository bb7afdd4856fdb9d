"""Review shows what is known before a verdict, and the audit trail says what was decided, by whom, when, on which ticket.

Before: an unknown email gave nothing to go on, and "did not happen" on a
receiver that does not dedupe sent the email again without a word of warning.
After "did not happen — retry" the trail said "committed by review — mail log
shows no delivery"; after a reconcile that found nothing, "committed by
reconcile — the helpdesk has no record of this key"; entries named database
ids and carried no time."""

import re

import pytest
from playwright.sync_api import expect

from ledger.clock import db_now
from ledger.models import Effect, EffectState
from ledger.services import reconcile_not_before

from ..conftest import wait_for
from ..factories import make_task
from .conftest import assert_no_alerts, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


def _unknown(task) -> Effect:
    return wait_for(lambda: Effect.objects.filter(owner_task=str(task.pk), state=EffectState.UNKNOWN).first(),
                    message="an unknown effect")


def test_an_unknown_email_shows_its_evidence_and_the_trail_keeps_the_verdict(page, live_server, workers, sandbox,
                                                                           alice):
    # a mail server that does not dedupe takes the message, then drops the connection
    sandbox.set_faults(drop_next={"email": 1}, honor_keys=False)
    task = make_task(1, notify_channel="email", prefix="M")
    assert workers.burst() == 0, workers.logs()
    effect = _unknown(task)
    login(page, "alice", "alice-pass-123")
    page.goto("/review/")
    row = page.locator(f"#effect-{effect.pk}")
    evidence = row.locator(".evidence")
    expect(evidence).to_contain_text("The request was sent and no answer came back")
    expect(evidence).to_contain_text("it may have been delivered")
    expect(evidence).to_contain_text("the error:")  # the channel's own words
    expect(evidence).to_contain_text("email (SMTP) has no look-up by key")
    expect(evidence.locator("time").first).to_have_text(TIME)
    expect(row.locator(".resend-warning")).to_contain_text(
        "sends it again: email (SMTP) does not refuse a repeat, so if it did happen the customer gets it twice")

    row.get_by_label("verdict").select_option("not_happened")
    row.get_by_label("reason").fill("mail log shows no delivery")
    row.get_by_role("button", name="Decide").click()
    expect(row).to_have_attribute("data-state", "failed")
    assert workers.burst() == 0, workers.logs()  # the retry runs: the email is sent again
    effect.refresh_from_db()
    assert effect.state == EffectState.COMMITTED and effect.attempts == 2
    assert sandbox.counts()["by_endpoint"]["email"] == 2, "as the warning said: a receiver without dedupe gets it twice"

    page.goto("/review/")
    entry = page.locator(".audit li").first
    expect(entry).to_contain_text("M-1")
    expect(entry).to_contain_text("notify_customer: review by alice — did not happen — retry — “mail log shows no delivery”")
    expect(entry).not_to_contain_text("committed")
    expect(entry.locator("time")).to_have_text(TIME)
    assert_no_alerts(page)


def test_a_reconcile_that_finds_nothing_is_written_as_did_not_happen(page, live_server, workers, sandbox, alice):
    sandbox.set_faults(drop_next={"notify": 1})
    task = make_task(1)
    assert workers.burst() == 0, workers.logs()
    effect = _unknown(task)
    sandbox.reset()  # the helpdesk has no record of the key any more
    # its "not found" counts only once nothing sent can still land (the drop: its in-flight bound + 2 s)
    wait_for(lambda: db_now() >= reconcile_not_before(Effect.objects.get(pk=effect.pk)), timeout=30,
             message="the effect's settle time")
    login(page, "alice", "alice-pass-123")
    page.goto("/review/")
    row = page.locator(f"#effect-{effect.pk}")
    expect(row.locator(".resend-warning")).to_contain_text("refuses a repeat of that key")
    row.get_by_role("button", name="Reconcile now").click()
    expect(row).to_have_attribute("data-state", "failed")
    assert workers.burst() == 0, workers.logs()
    assert Effect.objects.get(pk=effect.pk).state == EffectState.COMMITTED  # retried with the same key

    page.goto("/review/")
    entry = page.locator(".audit li").first
    expect(entry).to_contain_text("T-1")
    expect(entry).to_contain_text("reconcile — did not happen — retry — the helpdesk has no record of this key")
    expect(entry).not_to_contain_text("committed")
    item = page.locator(".audit li").first.get_by_role("link", name="T-1")
    item.click()
    history = page.locator("#history")
    expect(history).to_contain_text("verdict by reconcile")
    expect(page.locator(f"#effect-{effect.pk}")).to_contain_text("unknown → failed verdict by reconcile")
    expect(page.locator(f"#effect-{effect.pk}")).to_contain_text("failed → intent effect retry")
