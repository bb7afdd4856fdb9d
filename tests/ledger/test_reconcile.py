"""Reconcile asks the channel about an unknown effect only once the call it
guards can no longer be in flight (its intent time + the channel's connect
and read timeouts + a margin), and only an unknown effect: a found key is
committed, an absent one "did not happen", and a verdict that landed while
the look-up was out stands."""

import datetime as dt

import pytest
from django.utils import timezone

from ledger.channels import registry
from ledger.channels.base import Channel
from ledger.channels.rest import RestHelpdeskChannel
from ledger.faults import SimulatedCrash, arm
from ledger.models import Effect, EffectState, ResolvedBy, Verdict
from ledger.services import (
    RECONCILE_MARGIN_SECONDS,
    effect_reconcile,
    effect_review,
    effects_mark_unknown,
    reconcile_not_before,
)

from .helpers import run_notify

pytestmark = pytest.mark.django_db(transaction=True)



def unknown_effect(window="after_call", action="notify_customer") -> Effect:
    arm(window)
    with pytest.raises(SimulatedCrash):
        run_notify(action=action)
    [effect] = effects_mark_unknown(owner_item="i1", actor="recovery", note="holder died")
    return effect


def age(effect: Effect, seconds: float) -> Effect:
    Effect.objects.filter(pk=effect.pk).update(intent_at=timezone.now() - dt.timedelta(seconds=seconds))
    effect.refresh_from_db()
    return effect


class TestReconcileWaitsForTheCallToEnd:
    @pytest.mark.parametrize("action, call_seconds", [("notify_customer", 1 + 2), ("notify_customer_email", 2 * 2)])
    def test_the_wait_is_the_channels_timeouts_plus_a_margin(self, sandbox, action, call_seconds):
        effect = unknown_effect(action=action)
        wait = dt.timedelta(seconds=call_seconds + RECONCILE_MARGIN_SECONDS)
        assert RECONCILE_MARGIN_SECONDS == 2.0
        assert reconcile_not_before(effect) == effect.intent_at + wait

    def test_a_channel_without_timeouts_is_given_ten_seconds(self, sandbox, monkeypatch):
        effect = unknown_effect()
        monkeypatch.setitem(registry.HELPDESK_KINDS, "rest", Channel)
        assert reconcile_not_before(effect) == effect.intent_at + dt.timedelta(seconds=10 + 2)

    def test_too_early_nothing_is_asked(self, sandbox, lookups):
        effect = age(unknown_effect(), 4.5)  # 5 s to wait with the test settings
        effect = effect_reconcile(effect_id=effect.pk)
        assert (effect.state, effect.reconciled_at, lookups) == (EffectState.UNKNOWN, None, [])

    def test_once_the_call_cannot_be_in_flight_it_asks(self, sandbox, lookups):
        effect = age(unknown_effect(), 5.5)
        effect = effect_reconcile(effect_id=effect.pk)
        assert lookups == [effect.idempotency_key]
        assert (effect.state, effect.resolved_by, effect.verdict) == (
            EffectState.COMMITTED, ResolvedBy.RECONCILE, Verdict.HAPPENED)
        [delivery] = sandbox.deliveries(key=effect.idempotency_key)
        assert effect.external_ref == delivery["id"] and effect.reconciled_at is not None
        assert effect.last_reconcile.startswith("found by key")

    def test_it_asks_from_that_instant_on(self, sandbox, lookups, monkeypatch):
        effect = unknown_effect()
        ready = reconcile_not_before(effect)
        monkeypatch.setattr(timezone, "now", lambda: ready - dt.timedelta(microseconds=1))
        assert effect_reconcile(effect_id=effect.pk).reconciled_at is None and lookups == []
        monkeypatch.setattr(timezone, "now", lambda: ready)
        assert effect_reconcile(effect_id=effect.pk).reconciled_at == ready
        assert lookups == [effect.idempotency_key]

    def test_an_absent_key_did_not_happen(self, sandbox):
        effect = effect_reconcile(effect_id=unknown_effect("after_intent").pk, force=True)
        assert (effect.state, effect.resolved_by, effect.verdict) == (
            EffectState.FAILED, ResolvedBy.RECONCILE, Verdict.NOT_HAPPENED)
        assert effect.last_reconcile == "the helpdesk has no record of this key"
        assert list(effect.transitions.values_list("to_state", "actor")) == [
            ("intent", "worker-a"), ("unknown", "recovery"), ("failed", "reconcile")]


class TestReconcileTouchesOnlyUnknownEffects:
    def test_a_committed_effect_is_left_alone(self, sandbox, lookups):
        effect = run_notify().effect
        again = effect_reconcile(effect_id=effect.pk, force=True)
        assert (again.state, again.reconciled_at, lookups) == (EffectState.COMMITTED, None, [])
        assert again.transitions.count() == 2

    def test_a_verdict_given_while_the_look_up_was_out_stands(self, sandbox, monkeypatch):
        effect = unknown_effect()
        real = RestHelpdeskChannel.lookup

        def lookup_while_a_person_decides(self, key, payload):
            effect_review(effect_id=effect.pk, verdict=Verdict.SKIP, reason="customer called", actor="alice")
            return real(self, key, payload)

        monkeypatch.setattr(RestHelpdeskChannel, "lookup", lookup_while_a_person_decides)
        effect = effect_reconcile(effect_id=effect.pk, force=True)
        assert (effect.state, effect.resolved_by, effect.verdict) == (
            EffectState.SKIPPED, ResolvedBy.REVIEW, Verdict.SKIP)
        assert effect.reconciled_at is None
        assert effect.transitions.last().to_state == EffectState.SKIPPED
