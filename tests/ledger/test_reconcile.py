"""A look-up's "not found" about an unknown effect is trusted only once the
effect is settled: no earlier holder can still be calling and nothing it sent
can still land -- its lease deadline (the database's clock) + the channel's
longest call + its in-flight bound (a gateway's upstream timeout) + a margin.
Asked earlier, it leaves the effect unknown, with the answer as evidence; a
found key is committed whenever it is asked. Only an unknown effect: a found
key is committed, an absent one "did not happen", and a verdict that landed
while the look-up was out stands."""

import datetime as dt

import pytest

from ledger import services
from ledger.channels.base import Channel
from ledger.clock import SETTLE_MARGIN_SECONDS, db_now
from ledger.faults import SimulatedCrash, arm
from ledger.models import Effect, EffectState, ResolvedBy, Verdict
from ledger.services import effect_reconcile, effect_review, effects_mark_unknown, reconcile_not_before
from ticketagent.channels import registry
from ticketagent.channels.rest import RestHelpdeskChannel

from .helpers import run_notify

pytestmark = pytest.mark.django_db(transaction=True)



def unknown_effect(window="after_call", action="notify_customer", claim_ended_at=None) -> Effect:
    arm(window)
    with pytest.raises(SimulatedCrash):
        run_notify(action=action)
    [effect] = effects_mark_unknown(owner_item="i1", actor="recovery", note="holder died",
                                    claim_ended_at=claim_ended_at)
    return effect


def settled_in(effect: Effect, seconds: float) -> Effect:
    """The effect's settle time moved to `seconds` from the database's now (negative: past)."""
    Effect.objects.filter(pk=effect.pk).update(settle_after=db_now() + dt.timedelta(seconds=seconds))
    effect.refresh_from_db()
    return effect


class TestReconcileWaitsUntilTheEffectIsSettled:
    @pytest.mark.parametrize("action, call_seconds", [("notify_customer", 0.5 + 1.5), ("notify_customer_email", 2 * 1)])
    def test_the_wait_counts_from_the_old_holders_lease_deadline(self, sandbox, action, call_seconds):
        deadline = db_now() + dt.timedelta(seconds=3)
        effect = unknown_effect(action=action, claim_ended_at=deadline)
        assert SETTLE_MARGIN_SECONDS == 2.0
        assert effect.settle_after == deadline + dt.timedelta(seconds=call_seconds + SETTLE_MARGIN_SECONDS)
        assert reconcile_not_before(effect) == effect.settle_after

    def test_a_gateways_upstream_timeout_is_waited_out_too(self, sandbox, settings):
        settings.HELPDESK_UPSTREAM_TIMEOUT = 60
        deadline = db_now() + dt.timedelta(seconds=30)
        effect = unknown_effect(claim_ended_at=deadline)
        assert effect.settle_after == deadline + dt.timedelta(seconds=2 + 60 + SETTLE_MARGIN_SECONDS)

    def test_a_deadline_already_past_counts_from_now(self, sandbox):
        before = db_now()
        effect = unknown_effect(claim_ended_at=before - dt.timedelta(hours=1))
        assert effect.settle_after >= before + dt.timedelta(seconds=2 + SETTLE_MARGIN_SECONDS)

    def test_a_channel_without_timeouts_is_given_ten_seconds(self, sandbox, monkeypatch):
        arm("after_call")
        with pytest.raises(SimulatedCrash):
            run_notify()
        monkeypatch.setitem(registry.HELPDESK_KINDS, "rest", Channel)
        deadline = db_now() + dt.timedelta(seconds=30)
        [effect] = effects_mark_unknown(owner_item="i1", actor="recovery", note="holder died",
                                        claim_ended_at=deadline)
        assert effect.settle_after == deadline + dt.timedelta(seconds=10 + 0 + 2)

    def test_too_early_a_found_write_is_committed_at_once(self, sandbox, lookups):
        effect = settled_in(unknown_effect(), 30)
        effect = effect_reconcile(effect_id=effect.pk)
        assert lookups == [effect.idempotency_key], "a write that is found has landed, whenever it is asked"
        assert (effect.state, effect.resolved_by, effect.verdict) == (
            EffectState.COMMITTED, ResolvedBy.RECONCILE, Verdict.HAPPENED)

    def test_too_early_not_found_leaves_it_unknown_with_the_answer_as_evidence(self, sandbox, lookups):
        effect = settled_in(unknown_effect("after_intent"), 30)
        effect = effect_reconcile(effect_id=effect.pk, actor="alice")
        assert lookups == [effect.idempotency_key]
        assert (effect.state, effect.resolved_by, effect.verdict) == (EffectState.UNKNOWN, "", "")
        assert effect.reconciled_at is not None
        assert effect.last_reconcile == f"the helpdesk has no record of this key — {services.NOT_YET_TRUSTED}"
        last = effect.transitions.last()
        assert (last.event, last.from_state, last.to_state, last.actor) == (
            "EFFECT_RECONCILE_UNANSWERED", "unknown", "unknown", "alice")

    def test_once_settled_it_asks(self, sandbox, lookups):
        effect = settled_in(unknown_effect(), -0.01)
        effect = effect_reconcile(effect_id=effect.pk)
        assert lookups == [effect.idempotency_key]
        assert (effect.state, effect.resolved_by, effect.verdict) == (
            EffectState.COMMITTED, ResolvedBy.RECONCILE, Verdict.HAPPENED)
        [delivery] = sandbox.deliveries(key=effect.idempotency_key)
        assert effect.external_ref == delivery["id"] and effect.reconciled_at is not None
        assert effect.last_reconcile.startswith("found by key")

    def test_not_found_counts_from_that_instant_on_by_the_databases_clock(self, sandbox, lookups, monkeypatch):
        effect = unknown_effect("after_intent")
        ready = reconcile_not_before(effect)
        monkeypatch.setattr(services, "db_now", lambda: ready - dt.timedelta(microseconds=1))
        assert effect_reconcile(effect_id=effect.pk).state == EffectState.UNKNOWN
        monkeypatch.setattr(services, "db_now", lambda: ready)
        assert effect_reconcile(effect_id=effect.pk).state == EffectState.FAILED
        assert lookups == [effect.idempotency_key] * 2

    def test_a_row_without_a_settle_time_waits_from_its_intent(self, sandbox):
        effect = unknown_effect()
        Effect.objects.filter(pk=effect.pk).update(settle_after=None)
        effect.refresh_from_db()
        bound = RestHelpdeskChannel().max_call_seconds + SETTLE_MARGIN_SECONDS
        assert reconcile_not_before(effect) == effect.intent_at + dt.timedelta(seconds=bound)

    def test_an_absent_key_did_not_happen(self, sandbox):
        effect = effect_reconcile(effect_id=settled_in(unknown_effect("after_intent"), -0.01).pk)
        assert (effect.state, effect.resolved_by, effect.verdict) == (
            EffectState.FAILED, ResolvedBy.RECONCILE, Verdict.NOT_HAPPENED)
        assert effect.last_reconcile == "the helpdesk has no record of this key"
        assert list(effect.transitions.values_list("to_state", "actor")) == [
            ("intent", "worker-a"), ("unknown", "recovery"), ("failed", "reconcile")]


class TestReconcileTouchesOnlyUnknownEffects:
    def test_a_committed_effect_is_left_alone(self, sandbox, lookups):
        effect = run_notify().effect
        again = effect_reconcile(effect_id=effect.pk)
        assert (again.state, again.reconciled_at, lookups) == (EffectState.COMMITTED, None, [])
        assert again.transitions.count() == 2

    def test_a_verdict_given_while_the_look_up_was_out_stands(self, sandbox, monkeypatch):
        effect = unknown_effect()
        real = RestHelpdeskChannel.lookup

        def lookup_while_a_person_decides(self, key, payload):
            effect_review(effect_id=effect.pk, verdict=Verdict.SKIP, reason="customer called", actor="alice")
            return real(self, key, payload)

        monkeypatch.setattr(RestHelpdeskChannel, "lookup", lookup_while_a_person_decides)
        effect = effect_reconcile(effect_id=effect.pk)
        assert (effect.state, effect.resolved_by, effect.verdict) == (
            EffectState.SKIPPED, ResolvedBy.REVIEW, Verdict.SKIP)
        assert effect.reconciled_at is None
        assert effect.transitions.last().to_state == EffectState.SKIPPED
