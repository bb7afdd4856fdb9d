"""The Request Tracker channel against a real RT 5: each action read back from RT through REST2, the key in both
places, look-up after a crash in each window, and outcomes classified strictly.

Each test acts on tickets of its own and under a task name of its own (the server lives for the session).
"""

import uuid

import pytest

from ledger.faults import SimulatedCrash, arm
from ledger.models import Effect, EffectState
from ledger.services import effect_reconcile, effects_mark_unknown
from ops.killtest.rt import rt_writes
from ops.rt_server import CF_NAME, OTHER_QUEUE
from tests.gate_run import effect_run
from ticketagent.channels.registry import get_channel
from ticketagent.channels.rt import RTChannel, keys_in
from ticketagent.channels.rt_lookup import announced_change

from ..ledger.helpers import settled
from .lossy_proxy import LossyProxy

pytestmark = pytest.mark.django_db(transaction=True)

REPLY = {"to": "ann@example.com", "subject": "Re: Refund", "body": "Dear Ann,\n\nyour refund (Grüße) is on its way."}
BODIES = {
    "notify_customer": REPLY,
    "save_draft": {"subject": "Re: Refund", "body": "Dear Ann,\n\na draft."},
    "set_status": {"status": "pending"},
    "escalate": {"note": "urgent billing: charged twice"},
    "close_ticket": {"reason": "the customer asked to close it"},
}


@pytest.fixture
def task_name():
    return f"t-{uuid.uuid4().hex[:8]}"


def run(action, ticket, task, *, body=None, lease="worker-a", channel=None):
    return effect_run(action=action, payload={"ticket": str(ticket), "body": body or BODIES[action]},
                      owner_task=task, owner_item="i1", owner_step=action, claim_token=lease, channel=channel,
                      authorized_by="operator" if action == "close_ticket" else "")


def ticket_now(rt, ticket):
    return rt.get(f"/ticket/{ticket}?fields[Queue]=Name").body


def history(rt, ticket):
    items = rt.get(f"/ticket/{ticket}/history?fields=Type,Field,NewValue&per_page=100").body["items"]
    return [(t["Type"], t["Field"], t["NewValue"]) for t in items]


def mails_to(rt, address, ticket):
    return [m for m in rt.mails() if m["To"] == address and f"#{ticket}]" in m["Subject"]]


def test_notify_customer_is_one_reply_with_the_key_in_the_custom_field_and_the_content(rt_server, rt_settings,
                                                                                       task_name):
    rt = rt_server
    ticket = rt.create_ticket("Refund", requestor="ann@example.com")
    result = run("notify_customer", ticket, task_name)
    assert result.state == EffectState.COMMITTED, result.effect.last_error
    key = result.effect.idempotency_key
    [write] = rt_writes(rt, ticket)
    assert (write.type, write.keys, write.txn) == ("Correspond", frozenset({key}), result.effect.external_ref)
    txn = rt.get(f"/transaction/{write.txn}").body
    assert txn["CustomFields"][0]["name"] == CF_NAME and txn["CustomFields"][0]["values"] == [key]
    [part] = rt.get(f"/transaction/{write.txn}/attachments?fields=ContentType,Content").body["items"]
    assert part["ContentType"] == "text/html" and keys_in(part["Content"]) == [key]
    assert "<p>Dear Ann,</p>" in part["Content"] and "Grüße" in part["Content"]
    mailed = mails_to(rt, "ann@example.com", ticket)[-1].as_string()
    assert "your refund" in mailed and key not in mailed  # the customer never sees the marker


def test_save_draft_is_a_private_comment_marked_as_a_draft(rt_server, rt_settings, task_name):
    rt = rt_server
    ticket = rt.create_ticket("Draft me", requestor="bo@example.com")
    before = len(mails_to(rt, "bo@example.com", ticket))
    result = run("save_draft", ticket, task_name)
    assert result.state == EffectState.COMMITTED
    [write] = rt_writes(rt, ticket)
    assert write.type == "Comment" and write.keys == {result.effect.idempotency_key}
    content = rt.get(f"/transaction/{write.txn}/attachments?fields=Content").body["items"][0]["Content"]
    assert "Draft reply by the ticket agent: not sent to the customer" in content and "a draft." in content
    assert len(mails_to(rt, "bo@example.com", ticket)) == before  # a comment mails nobody


def test_set_status_writes_its_key_comment_first_then_changes_the_status(rt_server, rt_settings, task_name):
    rt = rt_server
    ticket = rt.create_ticket("Waiting on the customer")
    result = run("set_status", ticket, task_name)
    assert result.state == EffectState.COMMITTED, result.effect.last_error
    assert ticket_now(rt, ticket)["Status"] == "stalled"  # RT_STATUSES: pending -> stalled
    assert history(rt, ticket) == [("Create", "", ""), ("Comment", "", ""), ("Status", "Status", "stalled")]
    [write] = rt_writes(rt, ticket)
    assert write.keys == {result.effect.idempotency_key} and write.txn == result.effect.external_ref
    content = rt.get(f"/transaction/{write.txn}/attachments?fields=Content").body["items"][0]["Content"]
    assert announced_change(content) == {"Status": "stalled"}  # the change it comes before, for the look-up


def test_escalate_sets_queue_owner_and_priority_then_says_why(rt_server, rt_settings, task_name):
    rt = rt_server
    rt_settings.RT_ESCALATION_OWNER = "tier2"
    ticket = rt.create_ticket("Charged twice")
    result = run("escalate", ticket, task_name)
    assert result.state == EffectState.COMMITTED, result.effect.last_error
    now = ticket_now(rt, ticket)
    assert (now["Queue"]["Name"], now["Owner"]["id"], now["Priority"]) == (OTHER_QUEUE, "tier2", "100")
    assert history(rt, ticket)[1] == ("Comment", "", "")  # the key comment, then the changes
    content = rt.get(f"/transaction/{result.effect.external_ref}/attachments?fields=Content").body["items"][0]
    assert "The ticket agent escalates this ticket" in content["Content"] and "charged twice" in content["Content"]


def test_escalate_goes_where_the_playbook_says_over_the_settings(rt_server, rt_settings, task_name):
    """The playbook's queue and owner for the ticket (its rule's or category's, in the payload) win over
    RT_ESCALATION_QUEUE and RT_ESCALATION_OWNER; the priority still comes from RT_ESCALATION_PRIORITY."""
    rt = rt_server
    rt_settings.RT_ESCALATION_QUEUE, rt_settings.RT_ESCALATION_OWNER = "General", rt_server.user
    ticket = rt.create_ticket("Charged twice, route me")
    body = {**BODIES["escalate"], "queue": OTHER_QUEUE, "owner": "tier2"}
    result = run("escalate", ticket, task_name, body=body)
    assert result.state == EffectState.COMMITTED, result.effect.last_error
    now = ticket_now(rt, ticket)
    assert (now["Queue"]["Name"], now["Owner"]["id"], now["Priority"]) == (OTHER_QUEUE, "tier2", "100")
    content = rt.get(f"/transaction/{result.effect.external_ref}/attachments?fields=Content").body["items"][0]
    assert announced_change(content["Content"]) == {"Queue": OTHER_QUEUE, "Owner": "tier2", "Priority": "100"}


@pytest.mark.parametrize("target, said", [
    ({"queue": "No Such Queue"}, "no queue 'No Such Queue' visible to"),
    ({"queue": "General", "owner": "nosuch"}, "no Request Tracker user 'nosuch'"),
])
def test_an_escalation_target_rt_does_not_have_fails_and_writes_nothing(rt_server, rt_settings, task_name, target,
                                                                          said):
    """A queue or owner the playbook names that RT does not have (a typo) is found before the key comment: the
    item fails with the name, and the ticket is not touched (not moved in part, its priority unchanged)."""
    rt = rt_server
    ticket = rt.create_ticket("Route me somewhere that is not there")
    result = run("escalate", ticket, task_name, body={**BODIES["escalate"], **target})
    assert result.state == EffectState.FAILED
    assert said in result.effect.last_error and "nothing was sent" in result.effect.last_error
    assert [kind for kind, _, _ in history(rt, ticket)] == ["Create"]


def test_escalate_to_an_owner_steals_a_ticket_someone_else_owns(rt_server, rt_settings, task_name):
    rt = rt_server
    rt_settings.RT_ESCALATION_QUEUE, rt_settings.RT_ESCALATION_OWNER = "", rt_server.user
    rt_settings.RT_ESCALATION_PRIORITY = None
    ticket = rt.create_ticket("Owned by tier2")
    rt.put(f"/ticket/{ticket}", {"Owner": "tier2"})
    result = run("escalate", ticket, task_name)
    assert result.state == EffectState.COMMITTED, result.effect.last_error
    assert ticket_now(rt, ticket)["Owner"]["id"] == rt_server.user


def test_close_resolves_once_even_when_the_change_was_already_made(rt_server, rt_settings, task_name):
    """A ticket already resolved (by a person, or by an earlier version of the channel, which wrote the key
    comment after the change): setting the same status again is silent in RT -- the customer is told
    "Resolved" once."""
    rt = rt_server
    ticket = rt.create_ticket("Please close", requestor="cy@example.com")
    rt.put(f"/ticket/{ticket}", {"Status": "resolved"})  # the change landed, the key did not
    result = run("close_ticket", ticket, task_name)
    assert result.state == EffectState.COMMITTED
    assert [h for h in history(rt, ticket) if h[0] == "Status"] == [("Status", "Status", "resolved")]
    resolved = [m for m in mails_to(rt, "cy@example.com", ticket) if "Resolved:" in m["Subject"]]
    assert len(resolved) == 1


def test_a_status_rt_refuses_fails_and_its_key_comment_alone_is_not_found(rt_server, rt_settings, task_name):
    rt_settings.RT_STATUSES = {"pending": "flying"}
    ticket = rt_server.create_ticket("Nope")
    result = run("set_status", ticket, task_name)
    assert result.state == EffectState.FAILED
    assert "Status is new, not flying" in result.effect.last_error
    assert "isn't a valid status" in result.effect.last_error  # RT's own words
    assert [w.keys for w in rt_writes(rt_server, ticket)] == [{result.effect.idempotency_key}]  # the key comment
    assert ticket_now(rt_server, ticket)["Status"] == "new"
    seen = get_channel("helpdesk").lookup(result.effect.idempotency_key, result.effect.payload)
    assert seen.found is False and "nothing of the change it announces landed" in seen.detail, seen.detail


@pytest.mark.parametrize("action", ["notify_customer", "save_draft", "set_status", "close_ticket"])
def test_an_unknown_ticket_fails_with_a_clear_reason(rt_server, rt_settings, task_name, action):
    result = run(action, 999999, task_name)
    assert result.state == EffectState.FAILED and result.effect.attempts == 1
    assert result.effect.last_error == "ticket 999999 does not exist in Request Tracker"
    lookup = get_channel("helpdesk").lookup(result.effect.idempotency_key, result.effect.payload)
    assert lookup.found is False and "does not exist" in lookup.detail


def test_a_ticket_id_that_is_not_a_number_fails_without_a_call(rt_settings, task_name):
    result = run("notify_customer", "K1-7", task_name)
    assert result.state == EffectState.FAILED and "not a Request Tracker ticket id" in result.effect.last_error


def test_wrong_credentials_fail_naming_them(rt_server, rt_settings, task_name):
    ticket = rt_server.create_ticket("Wrong password")
    rt_settings.HELPDESK_PASSWORD = "wrong-password"
    result = run("notify_customer", ticket, task_name)
    assert result.state == EffectState.FAILED
    assert "refused the credentials (401)" in result.effect.last_error and "HELPDESK_PASSWORD" in result.effect.last_error
    assert rt_writes(rt_server, ticket) == []


@pytest.mark.parametrize("action", sorted(BODIES))
def test_a_crash_after_the_call_is_found_by_key_and_committed(rt_server, rt_settings, task_name, action):
    """A worker killed between the call and the outcome: recovery turns the
    intent into unknown, reconcile asks RT, finds the key, commits."""
    rt = rt_server
    ticket = rt.create_ticket(f"Crash after {action}")
    arm("after_call")
    with pytest.raises(SimulatedCrash):
        run(action, ticket, task_name)
    [effect] = effects_mark_unknown(owner_item="i1", actor="recovery", note="holder died")
    effect = effect_reconcile(effect_id=effect.pk)
    assert effect.state == EffectState.COMMITTED and effect.resolved_by == "reconcile"
    assert "found by custom field" in effect.last_reconcile
    writes = [w for w in rt_writes(rt, ticket) if effect.idempotency_key in w.keys]
    assert [w.txn for w in writes] == [effect.external_ref]


def test_a_crash_before_the_call_is_not_found_and_the_retry_writes_once(rt_server, rt_settings, task_name):
    rt = rt_server
    ticket = rt.create_ticket("Crash after intent", requestor="di@example.com")
    arm("after_intent")
    with pytest.raises(SimulatedCrash):
        run("notify_customer", ticket, task_name)
    [effect] = effects_mark_unknown(owner_item="i1", actor="recovery", note="holder died")
    effect = effect_reconcile(effect_id=settled(effect.pk))
    assert effect.state == EffectState.FAILED and effect.verdict == "not_happened"
    assert "none of its 0 replies and comments carries the key" in effect.last_reconcile
    result = run("notify_customer", ticket, task_name, lease="worker-b")
    assert result.state == EffectState.COMMITTED and result.effect.pk == effect.pk and result.effect.attempts == 2
    assert [w.type for w in rt_writes(rt, ticket)] == ["Correspond"]
    assert len(mails_to(rt, "di@example.com", ticket)) == 2  # the auto-reply on create, then the one reply


def test_a_reply_whose_custom_field_was_lost_is_found_by_its_content(rt_server, rt_settings, task_name):
    """The replier account may reply but not set custom fields: RT stores the
    reply without the key in the field (and still answers 201)."""
    rt = rt_server
    ticket = rt.create_ticket("No custom field rights")
    replier = RTChannel(user="replier", password=rt.users["replier"])
    arm("after_call")
    with pytest.raises(SimulatedCrash):
        run("notify_customer", ticket, task_name, channel=replier)
    [effect] = effects_mark_unknown(owner_item="i1", actor="recovery", note="holder died")
    [write] = rt_writes(rt, ticket)
    assert rt.get(f"/transaction/{write.txn}").body["CustomFields"][0]["values"] == []
    effect = effect_reconcile(effect_id=effect.pk)
    assert effect.state == EffectState.COMMITTED
    assert effect.last_reconcile == f"found by content on ticket {ticket}: transaction {write.txn}"


@pytest.mark.parametrize("mode", ["drop", "502", "403"])
def test_an_answer_lost_after_the_write_reached_rt_is_unknown_then_found(rt_server, rt_settings, task_name, mode):
    rt = rt_server
    ticket = rt.create_ticket(f"Answer lost ({mode})")
    proxy = LossyProxy(rt.base_url, mode=mode)
    try:
        result = run("notify_customer", ticket, task_name, channel=RTChannel(url=proxy.url))
    finally:
        proxy.close()
    # after a 403 the channel also asks whether the ticket exists (one GET)
    assert result.state == EffectState.UNKNOWN and proxy.forwarded == (2 if mode == "403" else 1)
    if mode == "403":  # a proxy's refusal page is not RT's: the write may have reached RT (it did)
        assert "answered 403 without RT's error body" in result.effect.last_error
    effect = effect_reconcile(effect_id=result.effect.pk)
    assert effect.state == EffectState.COMMITTED
    assert len(rt_writes(rt, ticket)) == 1


def test_a_request_that_never_reached_rt_is_unknown_then_not_found_and_retried_once(rt_server, rt_settings,
                                                                                    task_name):
    rt = rt_server
    ticket = rt.create_ticket("No answer")
    proxy = LossyProxy(rt.base_url, mode="blackhole")
    try:
        result = run("notify_customer", ticket, task_name,
                     channel=RTChannel(url=proxy.url, connect_timeout=0.5, read_timeout=0.5))
    finally:
        proxy.close()
    assert result.state == EffectState.UNKNOWN and "after sending" in result.effect.last_error
    effect = effect_reconcile(effect_id=settled(result.effect.pk))
    assert effect.state == EffectState.FAILED
    assert run("notify_customer", ticket, task_name, lease="worker-b").state == EffectState.COMMITTED
    assert len(rt_writes(rt, ticket)) == 1
    assert Effect.objects.get().attempts == 2


def test_rt_down_before_the_call_fails_and_nothing_was_written(rt_settings, task_name):
    result = run("notify_customer", 1, task_name, channel=RTChannel(url="http://127.0.0.1:9"))
    assert result.state == EffectState.FAILED and "could not connect to Request Tracker" in result.effect.last_error


def test_an_escalation_rt_makes_only_in_part_is_unknown_and_says_what_landed(rt_server, rt_settings, task_name):
    """Without CreateTicket in the escalation queue RT answers the PUT 200, keeps
    the priority and refuses the queue: part of the action landed, so it is
    unknown (never "provably not done"), and its error says which part."""
    rt = rt_server
    ticket = rt.create_ticket("Escalate me in part")
    listed = RTChannel(user="listed", password=rt.users["listed"])
    result = run("escalate", ticket, task_name, channel=listed)
    assert result.state == EffectState.UNKNOWN, result.effect.last_error
    error = result.effect.last_error
    assert f"made only part of the change on ticket {ticket}: landed: Priority 100; not landed: Queue is " \
           f"Support, not {OTHER_QUEUE}" in error, error
    now = ticket_now(rt, ticket)
    assert (now["Queue"]["Name"], now["Priority"]) == ("Support", "100")  # what RT kept
    assert [w.keys for w in rt_writes(rt, ticket)] == [{result.effect.idempotency_key}]  # the key comment, first


def test_a_change_rt_refuses_whole_is_failed(rt_server, rt_settings, task_name):
    """The same refusal with nothing else asked: the ticket read back shows nothing changed."""
    rt_settings.RT_ESCALATION_PRIORITY = None
    ticket = rt_server.create_ticket("Escalate me not at all")
    result = run("escalate", ticket, task_name, channel=RTChannel(user="listed", password=rt_server.users["listed"]))
    assert result.state == EffectState.FAILED, result.effect.last_error
    assert "read back, nothing of it changed" in result.effect.last_error
    assert ticket_now(rt_server, ticket)["Queue"]["Name"] == "Support"
