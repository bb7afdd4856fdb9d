"""A ticket change that landed in RT is never `failed`: the look-up finds the change itself, not only its key.

A status change, a queue move or a close cannot carry a key, so the key
comment that announces it is written first and the change after it; the
look-up finds the comment and then reads the ticket's history after it.
Each test loses an answer in front of a real RT 5 (tests/helpdesks/lossy_proxy.py)
and asks RT itself what happened.
"""

import uuid
from unittest import mock

import pytest

from ledger.models import EffectState, Verdict
from ledger.services import effect_reconcile, effect_review
from ops.rt_server import OTHER_QUEUE
from tests.ledger.helpers import settled
from ticketagent.channels.rt import RTChannel

from .lossy_proxy import LossyProxy
from .test_rt_channel import history, run, ticket_now

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def task_name():
    return f"t-{uuid.uuid4().hex[:8]}"

CHANGES = {  # what each action leaves on the ticket, read back from RT
    "set_status": lambda now: now["Status"] == "stalled",
    "escalate": lambda now: (now["Queue"]["Name"], now["Priority"]) == (OTHER_QUEUE, "100"),
    "close_ticket": lambda now: now["Status"] == "resolved",
}


def read_back_after_change(seen):
    """The ticket read back after its change (a GET once a PUT went through)."""
    return seen[-1][0] == "GET" and "PUT" in [method for method, _ in seen[:-1]]


def the_change(seen):
    return seen[-1][0] == "PUT"


FAULTS = {
    "read back 503": dict(mode="503", select=read_back_after_change),
    "change's answer dropped": dict(mode="drop", select=the_change),
}


def through(rt, **fault) -> tuple[LossyProxy, RTChannel]:
    proxy = LossyProxy(rt.base_url, **fault)
    return proxy, RTChannel(url=proxy.url)


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("action", sorted(CHANGES))
def test_a_change_that_landed_with_its_answer_lost_is_found_and_committed(rt_server, rt_settings, task_name,
                                                                          action, fault):
    rt = rt_server
    ticket = rt.create_ticket(f"{action}, {fault}", requestor="eve@example.com")
    proxy, channel = through(rt, **FAULTS[fault])
    try:
        result = run(action, ticket, task_name, channel=channel)
    finally:
        proxy.close()
    # a lost read back is asked again (the action's reads are retried): every try of it fails here
    assert proxy.faulted >= 1 and result.state == EffectState.UNKNOWN, result.effect.last_error
    assert CHANGES[action](ticket_now(rt, ticket))  # it landed
    effect = effect_reconcile(effect_id=settled(result.effect.pk))
    assert (effect.state, effect.verdict) == (EffectState.COMMITTED, Verdict.HAPPENED), effect.last_reconcile
    assert "after its key comment" in effect.last_reconcile, effect.last_reconcile
    again = run(action, ticket, task_name)
    assert again.blocked == "duplicate" and not again.called
    changes = [h for h in history(rt, ticket) if h[0] in ("Status", "Set")]
    assert len(changes) == (2 if action == "escalate" else 1), changes  # queue and priority, or the status: once


def test_a_change_that_never_reached_rt_is_not_found_and_the_retry_makes_it_once(rt_server, rt_settings, task_name):
    """The other side: "not found" stays authoritative when the change really did not land."""
    rt = rt_server
    ticket = rt.create_ticket("Change never arrived", requestor="fay@example.com")
    proxy, channel = through(rt, mode="503", select=the_change)
    try:
        result = run("close_ticket", ticket, task_name, channel=channel)
    finally:
        proxy.close()
    assert result.state == EffectState.UNKNOWN and ticket_now(rt, ticket)["Status"] == "new"
    effect = effect_reconcile(effect_id=settled(result.effect.pk))
    assert (effect.state, effect.verdict) == (EffectState.FAILED, Verdict.NOT_HAPPENED), effect.last_reconcile
    assert "nothing of the change it announces landed" in effect.last_reconcile, effect.last_reconcile
    retry = run("close_ticket", ticket, task_name, lease="worker-b")
    assert (retry.state, retry.effect.attempts) == (EffectState.COMMITTED, 2), retry.effect.last_error
    assert [h for h in history(rt, ticket) if h[0] == "Status"] == [("Status", "Status", "resolved")]
    resolved = [m for m in rt.mails() if m["To"] == "fay@example.com" and "Resolved:" in str(m["Subject"])]
    assert len(resolved) == 1


def test_a_field_that_already_held_its_value_is_no_trace_of_the_change(rt_server, rt_settings, task_name):
    """The ticket already has the escalation's priority; RT goes away between the key comment and the change.
    After the comment nothing changed: the priority "already so" says nothing about the change, so the
    look-up answers "not found" (not "a person decides") and the retry makes the change once."""
    rt = rt_server
    ticket = rt.create_ticket("Already urgent, escalation never arrived", Priority=100)
    assert ticket_now(rt, ticket)["Priority"] == "100"
    proxy, channel = through(rt, mode="503", select=the_change)
    try:
        result = run("escalate", ticket, task_name, channel=channel)
    finally:
        proxy.close()
    assert result.state == EffectState.UNKNOWN and ticket_now(rt, ticket)["Queue"]["Name"] != OTHER_QUEUE
    effect = effect_reconcile(effect_id=settled(result.effect.pk))
    assert (effect.state, effect.verdict) == (EffectState.FAILED, Verdict.NOT_HAPPENED), effect.last_reconcile
    assert "Priority 100 (already so)" in effect.last_reconcile, effect.last_reconcile
    retry = run("escalate", ticket, task_name, lease="worker-b")
    assert (retry.state, retry.effect.attempts) == (EffectState.COMMITTED, 2), retry.effect.last_error
    assert CHANGES["escalate"](ticket_now(rt, ticket))
    assert [h for h in history(rt, ticket) if h[1] in ("Queue", "Priority")] == [("Set", "Queue", mock.ANY)]


def test_an_escalation_that_landed_in_part_is_never_failed(rt_server, rt_settings, task_name):
    """Without CreateTicket in the escalation queue RT keeps the priority and refuses the queue: the
    look-up sees part of the change after the key comment, and leaves the verdict to a person."""
    rt = rt_server
    ticket = rt.create_ticket("Escalate me in part, then look me up")
    listed = RTChannel(user="listed", password=rt.users["listed"])
    result = run("escalate", ticket, task_name, channel=listed)
    assert result.state == EffectState.UNKNOWN, result.effect.last_error
    effect = effect_reconcile(effect_id=settled(result.effect.pk))
    assert effect.state == EffectState.UNKNOWN, effect.last_reconcile
    assert "landed: Priority" in effect.last_reconcile and "not landed: Queue" in effect.last_reconcile, \
        effect.last_reconcile


def test_a_retry_that_sends_nothing_keeps_what_the_first_attempt_may_have_done(rt_server, rt_settings, task_name):
    """Attempt 1's status change landed (its read-back got a 503); a person judged it "did not happen";
    attempt 2 met an RT that answered nothing but 503: its look-up could not tell and its first read failed,
    so it sent nothing. The effect is not "failed, did not happen": it is unknown, and the look-up finds
    attempt 1's change."""
    rt = rt_server
    ticket = rt.create_ticket("Attempts share what they know")
    proxy, channel = through(rt, **FAULTS["read back 503"])
    try:
        first = run("set_status", ticket, task_name, channel=channel)
    finally:
        proxy.close()
    assert first.state == EffectState.UNKNOWN and ticket_now(rt, ticket)["Status"] == "stalled"
    effect_review(effect_id=first.effect.pk, verdict=Verdict.NOT_HAPPENED, reason="RT shows nothing", actor="op")
    proxy, channel = through(rt, mode="503")
    try:
        second = run("set_status", ticket, task_name, lease="worker-b", channel=channel)
    finally:
        proxy.close()
    assert second.called and proxy.forwarded == 0  # nothing of attempt 2 reached RT
    assert (second.state, second.effect.attempts) == (EffectState.UNKNOWN, 2), second.effect.last_error
    assert "attempt 2 sent nothing" in second.effect.last_error, second.effect.last_error
    effect = effect_reconcile(effect_id=settled(second.effect.pk))
    assert effect.state == EffectState.COMMITTED, effect.last_reconcile
