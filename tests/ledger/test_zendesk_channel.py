"""The Zendesk channel against a fake Zendesk that answers with the documented shapes, through the real gate."""

import base64
import json
import time

import pytest
from django.urls import reverse

from ledger.actions import action_spec
from ledger.channels import lookup_channel_names
from ledger.channels.base import CallDeadline
from ledger.channels.redact import redact
from ledger.faults import SimulatedCrash, arm
from ledger.models import Effect, EffectState
from ledger.services import effect_reconcile, effects_mark_unknown
from tests.gate_run import effect_run
from ticketagent.channels.registry import get_channel
from ticketagent.channels.zendesk import DRAFT_MARK, KEY_FIELD, ZendeskChannel

from ..conftest import wait_for
from .helpers import settled

pytestmark = pytest.mark.django_db

REPLY = {"to": "ann@example.com", "subject": "Re: refund", "body": "Your refund is on its way."}



@pytest.fixture
def ticket(zd):
    return zd.state.add_ticket()["id"]


def run(action, ticket_id, body, *, item="i1", claim_token="worker-a", authorized_by=""):
    return effect_run(action=action, payload={"ticket": str(ticket_id), "body": body}, owner_task="t1",
                      owner_item=item, owner_step=action, claim_token=claim_token, authorized_by=authorized_by)


def custom_metadata(zd, ticket_id):
    """The custom metadata of the ticket's audits written by the API agent."""
    return [a["metadata"]["custom"] for a in zd.state.audit_list(ticket_id) if a["via"]["channel"] == "api"]


# --------------------------------------------------------------------------- each action, read back


def test_save_draft_is_a_private_note_marked_as_the_agents_draft_with_the_key_in_the_audit(zd, ticket):
    result = run("save_draft", ticket, {"subject": "Re: refund", "body": "Draft: the refund left on Monday."})
    assert result.state == EffectState.COMMITTED
    [note] = zd.state.comments(ticket, by_agent=True)
    assert note["public"] is False
    assert note["body"].startswith(DRAFT_MARK) and "Subject: Re: refund" in note["body"]
    assert "Draft: the refund left on Monday." in note["body"]
    assert zd.state.agent_replies(ticket) == [], "a draft never reaches the customer"
    [custom] = custom_metadata(zd, ticket)
    assert custom == {KEY_FIELD: result.effect.idempotency_key, "ticketagent_action": "save_draft"}
    assert len(json.dumps(custom)) < 1024, "Zendesk keeps at most 1 KB of custom metadata per audit"
    audit_id = zd.state.audit_list(ticket)[-1]["id"]
    assert result.effect.external_ref == f"ticket {ticket} audit {audit_id}"
    [put] = zd.logged("update", "PUT")
    assert put["path"] == f"/api/v2/tickets/{ticket}.json" and set(put["body"]) == {"ticket"}
    assert put["body"]["ticket"]["metadata"][KEY_FIELD] == result.effect.idempotency_key


def test_the_request_authenticates_with_the_api_token_and_sends_no_idempotency_key(zd, ticket):
    run("notify_customer", ticket, REPLY)
    [put] = zd.logged("update", "PUT")
    expected = base64.b64encode(f"{zd.email}/token:{zd.token}".encode()).decode()
    assert put["headers"]["authorization"] == f"Basic {expected}"
    # Zendesk honours Idempotency-Key only when creating tickets, not on updates.
    assert "idempotency-key" not in put["headers"]


def test_notify_customer_is_one_public_reply(zd, ticket):
    result = run("notify_customer", ticket, REPLY)
    assert result.state == EffectState.COMMITTED
    [reply] = zd.state.agent_replies(ticket)
    assert reply["body"] == "Your refund is on its way." and reply["public"] is True
    assert custom_metadata(zd, ticket)[0][KEY_FIELD] == result.effect.idempotency_key


@pytest.mark.parametrize(("status", "zendesk_status"), [("on_hold", "hold"), ("pending", "pending"),
                                                          ("escalated", "open"), ("solved", "solved")])
def test_set_status_maps_the_products_statuses_to_zendesks(zd, ticket, status, zendesk_status):
    zd.state.tickets[ticket]["status"] = "new"
    result = run("set_status", ticket, {"status": status})
    assert result.state == EffectState.COMMITTED
    assert zd.state.ticket(ticket)["status"] == zendesk_status
    [note] = zd.state.comments(ticket, by_agent=True)
    assert note["public"] is False and zendesk_status in note["body"]


def test_set_status_to_the_current_status_still_leaves_an_audit_with_the_key(zd, ticket):
    result = run("set_status", ticket, {"status": "open"})  # already open: the note makes the audit
    assert result.state == EffectState.COMMITTED
    assert custom_metadata(zd, ticket)[0][KEY_FIELD] == result.effect.idempotency_key


def test_escalate_sets_the_group_and_priority_with_a_private_note_saying_why(zd, ticket, settings):
    group = zd.state.add_group("Tier 2")
    settings.ZENDESK_ESCALATION_GROUP_ID = group["id"]
    settings.ZENDESK_ESCALATION_PRIORITY = "urgent"
    result = run("escalate", ticket, {"note": "high billing: charged twice"})
    assert result.state == EffectState.COMMITTED
    after = zd.state.ticket(ticket)
    assert (after["group_id"], after["priority"]) == (group["id"], "urgent")
    [note] = zd.state.comments(ticket, by_agent=True)
    assert note["public"] is False and "charged twice" in note["body"]


def test_escalate_goes_to_the_playbooks_group_by_name_or_id_over_the_setting(zd, ticket, settings):
    """The playbook's Zendesk group for the ticket (its rule's or category's, in the payload) wins over
    ZENDESK_ESCALATION_GROUP_ID: a number is the group's id, a name is looked up among every page of groups."""
    default = zd.state.add_group("Tier 1")
    for n in range(120):  # the group named is on the second page of 100
        zd.state.add_group(f"Team {n}")
    accounts = zd.state.add_group("Accounts & Plans")
    settings.ZENDESK_ESCALATION_GROUP_ID = default["id"]
    assert run("escalate", ticket, {"note": "x", "group": "accounts & plans"}).state == EffectState.COMMITTED
    assert zd.state.ticket(ticket)["group_id"] == accounts["id"]
    other = zd.state.add_ticket()["id"]
    result = run("escalate", other, {"note": "x", "group": str(default["id"] + 1)}, item="i2")
    assert result.state == EffectState.COMMITTED
    assert zd.state.ticket(other)["group_id"] == default["id"] + 1


def test_escalate_to_a_group_zendesk_does_not_have_fails_and_sends_nothing(zd, ticket, settings):
    zd.state.add_group("Tier 1")
    result = run("escalate", ticket, {"note": "x", "group": "Tier-3"})
    assert result.state == EffectState.FAILED
    assert "Zendesk has no group named 'Tier-3'" in result.effect.last_error
    assert zd.state.comments(ticket, by_agent=True) == []


def test_escalate_with_priority_keep_and_no_group_changes_only_the_note(zd, ticket, settings):
    settings.ZENDESK_ESCALATION_PRIORITY = "keep"
    assert run("escalate", ticket, {"note": "needs a human"}).state == EffectState.COMMITTED
    assert zd.state.ticket(ticket)["priority"] == "normal"
    assert len(zd.state.comments(ticket, by_agent=True)) == 1


def test_close_ticket_solves_it_and_never_closes_it(zd, settings):
    ticket_id = zd.state.add_ticket(assigned=False)["id"]
    result = run("close_ticket", ticket_id, {"reason": "refund confirmed"}, authorized_by="operator:ann")
    assert result.state == EffectState.COMMITTED
    after = zd.state.ticket(ticket_id)
    assert after["status"] == "solved"
    assert after["assignee_id"] == zd.state.agent["id"], "solving assigns the solving agent"
    [note] = zd.state.comments(ticket_id, by_agent=True)
    assert note["public"] is False and "refund confirmed" in note["body"]


# --------------------------------------------------------------------------- crashes and lost answers


def test_applied_but_answer_lost_is_unknown_then_reconciled_to_committed_with_one_reply(zd, ticket):
    zd.fail_next("update", "drop_after")
    result = run("notify_customer", ticket, REPLY)
    assert result.state == EffectState.UNKNOWN
    assert len(zd.state.agent_replies(ticket)) == 1, "the write took effect before the connection dropped"
    effect = effect_reconcile(effect_id=result.effect.pk)
    assert effect.state == EffectState.COMMITTED and effect.resolved_by == "reconcile"
    assert effect.external_ref.startswith(f"ticket {ticket} audit ")
    again = run("notify_customer", ticket, REPLY, claim_token="worker-b")
    assert again.called is False and again.blocked == "duplicate"
    assert len(zd.state.agent_replies(ticket)) == 1


def test_a_5xx_after_applying_is_unknown_and_reconcile_finds_it(zd, ticket):
    zd.fail_next("update", "error_after", status=503)
    result = run("notify_customer", ticket, REPLY)
    assert result.state == EffectState.UNKNOWN and "503" in result.effect.last_error
    assert effect_reconcile(effect_id=result.effect.pk).state == EffectState.COMMITTED
    assert len(zd.state.agent_replies(ticket)) == 1


def test_a_request_that_never_reached_zendesk_fails_and_the_retry_delivers_one_reply(zd, ticket, settings):
    settings.HELPDESK_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    result = run("notify_customer", ticket, REPLY)
    assert result.state == EffectState.FAILED
    assert "could not connect" in result.effect.last_error and "was not sent" in result.effect.last_error
    settings.HELPDESK_URL = zd.url
    retry = run("notify_customer", ticket, REPLY)
    assert retry.state == EffectState.COMMITTED and retry.effect.pk == result.effect.pk
    assert retry.effect.attempts == 2
    assert len(zd.state.agent_replies(ticket)) == 1


def test_dropped_before_applying_is_unknown_then_not_found_then_the_retry_delivers_one_reply(zd, ticket):
    zd.fail_next("update", "drop_before")
    result = run("notify_customer", ticket, REPLY)
    assert result.state == EffectState.UNKNOWN
    effect = effect_reconcile(effect_id=settled(result.effect.pk))
    assert effect.state == EffectState.FAILED and effect.verdict == "not_happened"
    assert "not found" in effect.last_reconcile
    retry = run("notify_customer", ticket, REPLY)
    assert retry.state == EffectState.COMMITTED and retry.effect.attempts == 2
    assert len(zd.state.agent_replies(ticket)) == 1


def test_a_timeout_is_unknown_and_the_late_write_is_found(zd, ticket, settings):
    settings.HELPDESK_READ_TIMEOUT = 0.3
    zd.fail_next("update", "slow", delay=1.0)
    result = run("notify_customer", ticket, REPLY)
    assert result.state == EffectState.UNKNOWN
    assert "timed out" in result.effect.last_error.lower() or "timeout" in result.effect.last_error.lower()
    wait_for(lambda: len(zd.state.agent_replies(ticket)) == 1, timeout=5, message="the late write")
    assert effect_reconcile(effect_id=result.effect.pk).state == EffectState.COMMITTED


def test_a_worker_killed_between_the_call_and_the_outcome_is_reconciled_by_key(zd, ticket):
    arm("after_call")
    with pytest.raises(SimulatedCrash):
        run("notify_customer", ticket, REPLY)
    assert Effect.objects.get().state == EffectState.INTENT
    [effect] = effects_mark_unknown(owner_item="i1", actor="recovery", note="holder died")
    assert effect.state == EffectState.UNKNOWN
    effect = effect_reconcile(effect_id=effect.pk)
    assert effect.state == EffectState.COMMITTED and effect.verdict == "happened"
    assert run("notify_customer", ticket, REPLY, claim_token="worker-b").called is False
    assert len(zd.state.agent_replies(ticket)) == 1


def test_a_worker_killed_before_the_call_is_found_absent_and_retried_once(zd, ticket):
    arm("after_intent")
    with pytest.raises(SimulatedCrash):
        run("notify_customer", ticket, REPLY)
    [effect] = effects_mark_unknown(owner_item="i1", actor="recovery", note="holder died")
    effect = effect_reconcile(effect_id=settled(effect.pk))
    assert effect.state == EffectState.FAILED and effect.verdict == "not_happened"
    assert run("notify_customer", ticket, REPLY, claim_token="worker-b").state == EffectState.COMMITTED
    assert len(zd.state.agent_replies(ticket)) == 1


# --------------------------------------------------------------------------- look-up and pagination


def test_lookup_reads_every_page_of_the_audits(zd, ticket):
    zd.page_limit = 2
    zd.state.add_audits(ticket, 7)  # 1 creation audit + 7 + ours = 9 audits, 5 pages of 2
    zd.fail_next("update", "drop_after")
    result = run("notify_customer", ticket, REPLY)
    effect = effect_reconcile(effect_id=result.effect.pk)
    assert effect.state == EffectState.COMMITTED
    pages = zd.logged("audits")
    assert len(pages) == 5
    assert pages[0]["query"]["page[size]"] == ["100"], "asks for Zendesk's largest page"
    assert "page[after]" in pages[-1]["query"]


def test_not_found_only_after_the_last_page(zd, ticket):
    zd.page_limit = 3
    zd.state.add_audits(ticket, 8)  # 9 audits, 3 pages
    answer = ZendeskChannel().lookup("f" * 64, {"ticket": str(ticket)})
    assert answer.found is False and "all read" in answer.detail and "9 audits" in answer.detail
    assert len(zd.logged("audits")) == 3


def test_a_failed_page_means_cannot_tell(zd, ticket):
    zd.page_limit = 2
    zd.state.add_audits(ticket, 5)
    zd.fail_next("update", "drop_before")
    result = run("notify_customer", ticket, REPLY)
    zd.fail_next("audits", "error_before", skip=1, status=502)
    effect = effect_reconcile(effect_id=result.effect.pk)
    assert effect.state == EffectState.UNKNOWN, "a partial read proves nothing"
    assert "cannot tell" in effect.last_reconcile and "502" in effect.last_reconcile
    assert zd.state.agent_replies(ticket) == []


def test_lookup_of_a_deleted_ticket_cannot_tell(zd, ticket):
    zd.fail_next("update", "drop_after")
    result = run("notify_customer", ticket, REPLY)
    del zd.state.tickets[ticket]
    effect = effect_reconcile(effect_id=result.effect.pk)
    assert effect.state == EffectState.UNKNOWN and "404" in effect.last_reconcile


def test_lookup_does_not_follow_a_next_link_to_another_host(zd, ticket, monkeypatch):
    zd.page_limit = 1
    zd.state.add_audits(ticket, 2)
    monkeypatch.setattr(zd.httpd.RequestHandlerClass, "link",
                        lambda self, query, **changes: "https://elsewhere.example/api/v2/tickets/1/audits.json")
    answer = ZendeskChannel().lookup("f" * 64, {"ticket": str(ticket)})
    assert answer.found is None and "not on" in answer.detail
    assert len(zd.logged("audits")) == 1, "the credentials never went to the other host"


# --------------------------------------------------------------------------- refusals and rate limits


def test_a_429_with_a_short_retry_after_is_waited_out_and_sent_once_more(zd, ticket):
    zd.fail_next("update", "rate_limit", retry_after="1")
    started = time.monotonic()
    result = run("notify_customer", ticket, REPLY)
    assert result.state == EffectState.COMMITTED
    assert time.monotonic() - started >= 1.0
    assert len(zd.logged("update")) == 2
    assert len(zd.state.agent_replies(ticket)) == 1


def test_a_429_asking_longer_than_the_cap_fails_at_once_with_the_reason(zd, ticket):
    zd.fail_next("update", "rate_limit", retry_after="120")
    started = time.monotonic()
    result = run("notify_customer", ticket, REPLY)
    assert time.monotonic() - started < 1.5, "a worker is not held for the whole Retry-After"
    assert result.state == EffectState.FAILED
    error = result.effect.last_error
    assert "429" in error and "Retry-After: 120" in error and "ZENDESK_RATE_LIMIT_MAX_WAIT" in error
    assert f"ticket {ticket}" in error
    assert zd.state.agent_replies(ticket) == [] and len(zd.logged("update")) == 1
    assert run("notify_customer", ticket, REPLY).state == EffectState.COMMITTED, "failed: may run again"


def test_a_second_429_fails_after_one_wait(zd, ticket):
    zd.fail_next("update", "rate_limit", retry_after="1", times=2)
    result = run("notify_customer", ticket, REPLY)
    assert result.state == EffectState.FAILED and "429" in result.effect.last_error
    assert len(zd.logged("update")) == 2 and zd.state.agent_replies(ticket) == []


def test_an_unknown_ticket_fails_clearly(zd):
    result = run("notify_customer", 987654, REPLY)
    assert result.state == EffectState.FAILED
    assert "Zendesk has no ticket 987654 (HTTP 404)" in result.effect.last_error


def test_a_ticket_id_that_is_not_a_number_fails_without_a_request(zd):
    result = run("notify_customer", "T-1", REPLY)
    assert result.state == EffectState.FAILED and "not a Zendesk ticket id" in result.effect.last_error
    assert zd.logged() == []


def test_a_closed_ticket_refuses_with_422_naming_the_ticket(zd):
    ticket_id = zd.state.add_ticket(status="closed")["id"]
    result = run("notify_customer", ticket_id, REPLY)
    assert result.state == EffectState.FAILED
    error = result.effect.last_error
    assert f"the update of ticket {ticket_id} (HTTP 422)" in error and "closed prevents ticket update" in error


def test_an_escalation_group_that_does_not_exist_is_a_422(zd, ticket, settings):
    settings.ZENDESK_ESCALATION_GROUP_ID = 424242
    result = run("escalate", ticket, {"note": "x"})
    assert result.state == EffectState.FAILED
    assert "HTTP 422" in result.effect.last_error and "group_id" in result.effect.last_error


def test_wrong_credentials_fail_with_a_credentials_message_that_holds_no_secret(zd, ticket, settings):
    settings.HELPDESK_TOKEN = "wrong-token-8d2f7a61"
    result = run("notify_customer", ticket, REPLY)
    assert result.state == EffectState.FAILED
    error = result.effect.last_error
    assert "HTTP 401" in error and "HELPDESK_TOKEN" in error and "HELPDESK_USER" in error
    assert "wrong-token-8d2f7a61" not in error
    assert zd.state.agent_replies(ticket) == []


def test_a_forbidden_ticket_fails_with_403(zd, ticket):
    zd.state.forbidden.add(ticket)
    result = run("notify_customer", ticket, REPLY)
    assert result.state == EffectState.FAILED and "HTTP 403" in result.effect.last_error


def test_a_5xx_before_applying_is_unknown_then_not_found(zd, ticket):
    zd.fail_next("update", "error_before", status=500)
    result = run("notify_customer", ticket, REPLY)
    assert result.state == EffectState.UNKNOWN
    assert effect_reconcile(effect_id=settled(result.effect.pk)).state == EffectState.FAILED
    assert run("notify_customer", ticket, REPLY).state == EffectState.COMMITTED
    assert len(zd.state.agent_replies(ticket)) == 1


# --------------------------------------------------------------------------- check, registry, redaction


def test_check_passes_with_good_settings_and_writes_nothing(zd):
    assert ZendeskChannel().check() == []
    assert [r["kind"] for r in zd.logged()] == ["me"]
    assert zd.logged("update") == []


def test_check_names_wrong_credentials(zd, settings):
    settings.HELPDESK_TOKEN = "not-the-token-5a9e"
    [problem] = ZendeskChannel().check()
    assert "HTTP 401" in problem and "HELPDESK_TOKEN" in problem and "not-the-token-5a9e" not in problem


def test_check_names_missing_settings_and_an_unreachable_server(zd, settings):
    settings.HELPDESK_USER = ""
    settings.HELPDESK_TOKEN = ""
    problems = ZendeskChannel().check()
    assert any("HELPDESK_TOKEN is not set" in p for p in problems)
    assert any("HELPDESK_USER is not set" in p for p in problems)
    settings.HELPDESK_USER, settings.HELPDESK_TOKEN = zd.email, zd.token
    settings.HELPDESK_URL = "http://127.0.0.1:9"
    [problem] = ZendeskChannel().check()
    assert "could not connect" in problem


def test_check_verifies_the_escalation_group(zd, settings):
    settings.ZENDESK_ESCALATION_GROUP_ID = 31337
    [problem] = ZendeskChannel().check()
    assert "group 31337" in problem and "ZENDESK_ESCALATION_GROUP_ID" in problem
    settings.ZENDESK_ESCALATION_GROUP_ID = zd.state.add_group("Tier 2")["id"]
    assert ZendeskChannel().check() == []


def test_the_registry_serves_zendesk_with_look_up(zd):
    channel = get_channel("helpdesk")
    assert isinstance(channel, ZendeskChannel)
    assert channel.abilities.honours_key is False and channel.supports_lookup
    assert "helpdesk" in lookup_channel_names()
    assert channel.max_call_seconds >= 2 * (1.0 + 2.0)


def test_the_base64_basic_credential_is_redacted(zd):
    encoded = base64.b64encode(f"{zd.email}/token:{zd.token}".encode()).decode()
    assert encoded not in redact(f"the server echoed {encoded} back")
    assert zd.token not in redact(f"token {zd.token}")


def test_an_action_the_channel_does_not_know_fails_without_a_request(zd, ticket):
    result = ZendeskChannel().perform(action_spec("notify_customer_email"), {"ticket": str(ticket), "body": REPLY},
                                      "k" * 64, CallDeadline.within(60))
    assert result.state == EffectState.FAILED and "no mapping" in result.error
    assert zd.logged() == []


def test_the_effect_classes_page_shows_zendesks_abilities(zd, client, bob):
    client.force_login(bob)
    page = client.get(reverse("effect-classes")).content.decode()
    assert "audit metadata of the ticket update" in page
    assert "the ticket&#x27;s audits, every page" in page or "the ticket's audits, every page" in page
    assert zd.logged() == [], "showing the abilities calls nothing"



# --------------------------------------------------------------------------- why an update did not commit


def cause_of(ticket_id) -> tuple[str, str]:
    """(state, cause) of one notify_customer update, straight from the channel."""
    result = ZendeskChannel().perform(action_spec("notify_customer"), {"ticket": str(ticket_id), "body": REPLY},
                                      "k" * 64, CallDeadline.within(60))
    return result.state, result.cause


def test_zendesks_refusals_are_refused_and_its_absences_unavailable(zd, ticket, settings):
    """A 404, 403 or 422 is Zendesk's answer (refused: the item fails); a 429 beyond the wait, a 5xx, a
    timeout or no connection is Zendesk unavailable (the item waits for it)."""
    assert cause_of(987654) == (EffectState.FAILED, "refused")
    zd.state.forbidden.add(ticket)
    assert cause_of(ticket) == (EffectState.FAILED, "refused")
    zd.state.forbidden.discard(ticket)
    zd.fail_next("update", "rate_limit", retry_after="120")
    assert cause_of(ticket) == (EffectState.FAILED, "unavailable")
    zd.fail_next("update", "error_before", status=503)
    assert cause_of(ticket) == (EffectState.UNKNOWN, "unavailable")
    assert cause_of("T-1") == (EffectState.FAILED, "invalid")
    settings.HELPDESK_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    assert cause_of(ticket) == (EffectState.FAILED, "unavailable")


def test_the_probe_reads_the_api_user_and_writes_nothing(zd, settings):
    assert ZendeskChannel().probe() == ""
    assert [(r["method"], r["kind"]) for r in zd.logged()] == [("GET", "me")]
    settings.HELPDESK_URL = "http://127.0.0.1:9"
    assert "could not connect" in ZendeskChannel().probe()
