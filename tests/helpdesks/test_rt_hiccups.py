"""A passing hiccup on the reads of an RT action (the ticket read before a change, the change read back): a 503,
a connection closed without an answer, a read that stalls until it times out. The read is asked again inside the
action's time, and the action lands once. A read that keeps failing ends the action before any write: failed with
RT unavailable (its item waits for RT, it does not fail); only RT's definite refusal (a ticket that does not
exist, a right the user lacks) is failed as refused.

Against the test RT through a proxy that faults the chosen requests before they reach RT (`LossyProxy.fault_next`).
"""

import uuid

import pytest

from ledger.actions import action_spec
from ledger.channels.base import CallDeadline
from ledger.models import EffectState
from ops.killtest.rt import rt_writes
from ticketagent.channels.rt import RTChannel

from .lossy_proxy import LossyProxy
from .test_rt_channel import BODIES, history, run

pytestmark = pytest.mark.django_db(transaction=True)

# a stall costs one read timeout: short ones, so the action has time left for the read asked again
FAST = {"connect_timeout": 0.5, "read_timeout": 1.5}


@pytest.fixture
def task_name():
    return f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def proxy(rt_server):
    found = LossyProxy(rt_server.base_url, mode="pass")
    yield found
    found.close()


def ticket_reads(ticket) -> str:
    """The path of the action's reads of the ticket (not of its history or its replies)."""
    return rf"^/REST/2\.0/ticket/{ticket}\?"


@pytest.mark.parametrize("fault", ["503", "close", "stall"])
def test_a_hiccup_on_the_read_before_a_change_is_asked_again_and_the_change_lands_once(rt_server, rt_settings,
                                                                                      task_name, proxy, fault):
    rt = rt_server
    ticket = rt.create_ticket(f"Hiccup before close ({fault})", requestor="hi@example.com")
    proxy.fault_next(fault, method="GET", path=ticket_reads(ticket))
    result = run("close_ticket", ticket, task_name, channel=RTChannel(url=proxy.url, **FAST))
    assert result.state == EffectState.COMMITTED, result.effect.last_error
    assert proxy.faulted == 1
    assert [h for h in history(rt, ticket) if h[0] == "Status"] == [("Status", "Status", "resolved")]
    [write] = rt_writes(rt, ticket)
    assert write.keys == {result.effect.idempotency_key}


def test_two_hiccups_in_a_row_on_the_read_before_a_change_still_land_it_once(rt_server, rt_settings, task_name,
                                                                             proxy):
    ticket = rt_server.create_ticket("Two hiccups before set_status")
    proxy.fault_next("503", method="GET", path=ticket_reads(ticket))
    proxy.fault_next("close", method="GET", path=ticket_reads(ticket))
    result = run("set_status", ticket, task_name, channel=RTChannel(url=proxy.url, **FAST))
    assert result.state == EffectState.COMMITTED, result.effect.last_error
    assert proxy.faulted == 2
    assert [h for h in history(rt_server, ticket) if h[0] == "Status"] == [("Status", "Status", "stalled")]
    assert len(rt_writes(rt_server, ticket)) == 1


def test_a_hiccup_on_the_read_back_after_the_change_is_asked_again(rt_server, rt_settings, task_name, proxy):
    rt = rt_server
    ticket = rt.create_ticket("Hiccup on the read back")
    proxy.fault_next("close", method="GET", path=ticket_reads(ticket), skip=1)  # the read before the PUT passes
    result = run("close_ticket", ticket, task_name, channel=RTChannel(url=proxy.url, **FAST))
    assert result.state == EffectState.COMMITTED, result.effect.last_error
    assert proxy.faulted == 1
    assert [h for h in history(rt, ticket) if h[0] == "Status"] == [("Status", "Status", "resolved")]
    assert len(rt_writes(rt, ticket)) == 1


def test_a_read_that_keeps_failing_ends_the_action_before_any_write_rt_unavailable(rt_server, rt_settings, proxy):
    rt = rt_server
    ticket = rt.create_ticket("RT answers 503 to every read")
    proxy.fault_next("503", 50, method="GET", path=ticket_reads(ticket))
    channel = RTChannel(url=proxy.url, **FAST)
    result = channel.perform(action_spec("close_ticket"), {"ticket": str(ticket), "body": BODIES["close_ticket"]},
                             "k-unavailable", CallDeadline.within(60))
    assert (result.state, result.cause) == (EffectState.FAILED, "unavailable"), result.error
    assert "answered 503" in result.error and "(3 tries)" in result.error
    assert proxy.faulted == 3 and proxy.forwarded == 0  # nothing reached RT
    assert rt_writes(rt, ticket) == [] and [h for h in history(rt, ticket) if h[0] == "Status"] == []


def test_rt_not_reachable_is_failed_unavailable_not_refused(rt_settings):
    result = RTChannel(url="http://127.0.0.1:9").perform(
        action_spec("notify_customer"), {"ticket": "1", "body": BODIES["notify_customer"]}, "k-down", CallDeadline.within(60))
    assert (result.state, result.cause) == (EffectState.FAILED, "unavailable")
    assert "could not connect to Request Tracker" in result.error


@pytest.mark.parametrize("action", ["notify_customer", "close_ticket"])
def test_a_ticket_that_does_not_exist_is_refused(rt_server, rt_settings, action):
    result = RTChannel().perform(action_spec(action), {"ticket": "999999", "body": BODIES[action]}, f"k-{action}", CallDeadline.within(60))
    assert (result.state, result.cause) == (EffectState.FAILED, "refused")
    assert result.error == "ticket 999999 does not exist in Request Tracker"


@pytest.mark.parametrize("action", ["notify_customer", "set_status"])
def test_a_right_the_user_lacks_is_refused(rt_server, rt_settings, action):
    """The viewer may see tickets, not reply to them or change them."""
    ticket = rt_server.create_ticket(f"Viewer cannot {action}")
    viewer = RTChannel(user="viewer", password=rt_server.users["viewer"])
    result = viewer.perform(action_spec(action), {"ticket": str(ticket), "body": BODIES[action]}, f"k-v-{action}", CallDeadline.within(60))
    assert (result.state, result.cause) == (EffectState.FAILED, "refused"), result.error
    assert rt_writes(rt_server, ticket) == []


def test_a_ticket_id_that_is_not_a_number_cannot_be_sent(rt_settings):
    result = RTChannel().perform(action_spec("notify_customer"), {"ticket": "K1-7", "body": BODIES["notify_customer"]},
                                 "k-invalid", CallDeadline.within(60))
    assert (result.state, result.cause) == (EffectState.FAILED, "invalid")


def test_the_probe_answers_while_rt_does_and_says_why_not_when_it_does_not(rt_server, rt_settings, proxy):
    assert RTChannel(url=proxy.url).probe() == ""
    proxy.fault_next("503", method="GET", path=r"/REST/2\.0/rt$")
    assert RTChannel(url=proxy.url).probe().startswith("GET /rt answered 503")
    assert "could not connect" in RTChannel(url="http://127.0.0.1:9").probe()
