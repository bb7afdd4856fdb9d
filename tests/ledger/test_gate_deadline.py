"""The caller's deadline (when its claim may end) and the call: a request that cannot come back in time is
not sent; an action whose first write left before the deadline came is unknown, never "not sent"; an
effect provably not sent is failed for the next attempt, only under its own claim."""

import time

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from ledger.actions import registered_actions
from ledger.channels.base import CallDeadline, Channel, committed
from ledger.channels.http import HttpClient
from ledger.gate import effect_perform, intent_prepare, intent_record
from ledger.models import Effect, EffectState
from ledger.services import effect_not_sent
from tests.gate_run import effect_run

from .helpers import NOTIFY

pytestmark = pytest.mark.django_db(transaction=True)


def recorded(token="worker-a"):
    intent = intent_prepare(action="notify_customer", payload=NOTIFY, owner_task="t1", owner_item="i1",
                            owner_step="notify_customer", claim_token=token)
    with transaction.atomic():
        return intent, intent_record(intent).effect


class TwoWrites(Channel):
    """An action made of two writes, each asking the deadline right before it leaves (as `HttpClient` does)."""

    name = "helpdesk"

    def __init__(self, second_wait: float):
        self.second_wait, self.sent = second_wait, []

    def perform(self, spec, payload, key, deadline):
        for n, wait in enumerate((0.0, self.second_wait), start=1):
            deadline.room_to_send(wait, f"write {n}")
            deadline.writes_sent += 1
            self.sent.append(n)
        return committed("both writes")


def test_a_deadline_already_past_sends_nothing_and_leaves_the_intent(sandbox):
    intent, effect = recorded()
    assert effect_perform(intent, effect, deadline=time.monotonic() - 1) is None
    assert sandbox.counts()["requests"] == 0
    assert Effect.objects.get().state == EffectState.INTENT


def test_effect_run_says_expired_when_nothing_could_leave(sandbox):
    result = effect_run(action="notify_customer", payload=NOTIFY, owner_task="t1", owner_item="i1",
                        owner_step="notify_customer", claim_token="worker-a", deadline=time.monotonic() - 1)
    assert (result.blocked, result.called, result.state) == ("expired", False, EffectState.INTENT)
    assert sandbox.counts()["requests"] == 0


def test_a_deadline_that_comes_after_the_first_write_left_is_unknown_unanswered():
    intent, effect = recorded()
    channel = TwoWrites(second_wait=3600.0)
    result = effect_perform(intent, effect, deadline=time.monotonic() + 60, channel=channel)
    assert channel.sent == [1], "the second write was not sent"
    assert result.state == EffectState.UNKNOWN and result.answered is False
    assert "write 2 not sent" in result.error and "after 1 write(s) of this action had left" in result.error


def test_a_call_with_no_deadline_is_an_error_and_sends_nothing(sandbox):
    intent, effect = recorded()
    with pytest.raises(TypeError):
        effect_perform(intent, effect, deadline=None)
    assert sandbox.counts()["requests"] == 0
    assert Effect.objects.get().state == EffectState.INTENT


def test_a_channel_that_asks_no_deadline_is_still_not_called_past_it():
    """The gate asks the deadline for the channel's longest call itself: an adapter that never asks
    (`Quiet`) is not called once the caller's claim may end during the call."""
    intent, effect = recorded()
    channel = Quiet()
    assert effect_perform(intent, effect, deadline=time.monotonic() + channel.max_call_seconds / 2,
                          channel=channel) is None
    assert channel.called == 0


def test_an_http_write_without_the_callers_deadline_is_refused_before_it_connects():
    client = HttpClient("http://127.0.0.1:9", system="the helpdesk", connect_timeout=0.5, read_timeout=0.5)
    with pytest.raises(TypeError, match="deadline"):
        client.request("POST", "/api/tickets/T-1/notify", {"x": 1})
    with pytest.raises(TypeError):
        CallDeadline(None)


class Quiet(Channel):
    name = "helpdesk"
    called = 0

    def perform(self, spec, payload, key, deadline):
        self.called += 1
        return committed("sent")


def test_with_room_for_every_write_the_call_is_made():
    intent, effect = recorded()
    channel = TwoWrites(second_wait=1.0)
    result = effect_perform(intent, effect, deadline=time.monotonic() + 60, channel=channel)
    assert channel.sent == [1, 2] and result.state == EffectState.COMMITTED


class TestNotSent:
    def test_an_intent_of_this_claim_becomes_failed_with_its_transition(self):
        _, effect = recorded()
        with transaction.atomic():
            assert effect_not_sent(effect_id=effect.pk, claim_token="worker-a", actor="w1", note="not sent: in doubt")
        row = Effect.objects.get()
        assert (row.state, row.answered, row.last_error) == (EffectState.FAILED, False, "not sent: in doubt")
        assert row.outcome_at is not None
        assert list(row.transitions.values_list("to_state", flat=True)) == ["intent", "failed"]

    def test_another_claims_or_a_settled_row_is_left_as_it_is(self):
        _, effect = recorded()
        with transaction.atomic():
            assert not effect_not_sent(effect_id=effect.pk, claim_token="worker-b", actor="w1", note="x")
        Effect.objects.filter(pk=effect.pk).update(state=EffectState.COMMITTED)
        with transaction.atomic():
            assert not effect_not_sent(effect_id=effect.pk, claim_token="worker-a", actor="w1", note="x")
        row = Effect.objects.get()
        assert row.state == EffectState.COMMITTED and row.last_error == ""
        assert list(row.transitions.values_list("to_state", flat=True)) == ["intent"]


def test_an_action_table_whose_entry_is_not_its_spec_is_refused(settings):
    settings.LEDGER_ACTIONS = "tests.ledger.test_gate_deadline.BAD_TABLE"
    with pytest.raises(ImproperlyConfigured, match="'notify_customer' is not an ActionSpec of that name"):
        registered_actions()


BAD_TABLE = {"notify_customer": "not a spec"}
