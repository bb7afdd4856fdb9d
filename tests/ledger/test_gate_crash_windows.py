"""Each window of the effect protocol, made deterministic with a crash hook,
against the real sandbox helpdesk — in both of its key modes. In every
window the customer receives the notification exactly once."""

import pytest

from ledger.faults import SimulatedCrash, arm
from ledger.models import BlockedDuplicate, Effect, EffectState
from ledger.services import effect_reconcile, effects_mark_unknown

from .helpers import run_notify, settled

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["honor", "ignore"])
def helpdesk(request, sandbox):
    sandbox.set_faults(honor_keys=request.param == "honor")
    return sandbox


def deliveries(sandbox, effect=None):
    return sandbox.counts()["by_endpoint"]["notify"] if effect is None else len(
        sandbox.deliveries(key=effect.idempotency_key))


def recover(item="i1"):
    """What the recovery sweep does for a dead holder: intent -> unknown."""
    return effects_mark_unknown(owner_item=item, actor="recovery", note="holder died")


def test_crash_before_intent_records_nothing_and_the_rerun_is_clean(helpdesk):
    arm("before_intent")
    with pytest.raises(SimulatedCrash):
        run_notify()
    assert Effect.objects.count() == 0
    assert deliveries(helpdesk) == 0

    result = run_notify(claim_token="worker-b")
    assert result.state == EffectState.COMMITTED and result.called
    assert deliveries(helpdesk) == 1


def test_crash_after_intent_becomes_unknown_reconcile_finds_nothing_retry_delivers_once(helpdesk):
    arm("after_intent")
    with pytest.raises(SimulatedCrash):
        run_notify()
    effect = Effect.objects.get()
    assert effect.state == EffectState.INTENT
    assert deliveries(helpdesk) == 0

    [effect] = recover()
    assert effect.state == EffectState.UNKNOWN
    effect = effect_reconcile(effect_id=settled(effect.pk))
    assert effect.state == EffectState.FAILED and effect.verdict == "not_happened"
    assert effect.resolved_by == "reconcile"

    result = run_notify(claim_token="worker-b")
    assert result.called and result.state == EffectState.COMMITTED
    assert result.effect.pk == effect.pk, "the retry reuses the same row and key"
    assert result.effect.attempts == 2
    assert deliveries(helpdesk, result.effect) == 1


def test_crash_after_call_becomes_unknown_and_reconciles_to_committed(helpdesk):
    arm("after_call")
    with pytest.raises(SimulatedCrash):
        run_notify()
    assert deliveries(helpdesk) == 1, "the call went out before the crash"
    [effect] = recover()
    effect = effect_reconcile(effect_id=effect.pk)
    assert effect.state == EffectState.COMMITTED and effect.resolved_by == "reconcile"

    result = run_notify(claim_token="worker-b")
    assert not result.called and result.blocked == "duplicate"
    assert deliveries(helpdesk, effect) == 1


def test_crash_after_commit_never_calls_again(helpdesk):
    arm("after_commit")
    with pytest.raises(SimulatedCrash):
        run_notify()
    assert Effect.objects.get().state == EffectState.COMMITTED
    assert recover() == []

    result = run_notify(claim_token="worker-b")
    assert not result.called and result.state == EffectState.COMMITTED
    assert BlockedDuplicate.objects.count() == 1
    assert deliveries(helpdesk) == 1


def test_unknown_is_never_retried_blindly(helpdesk):
    arm("after_call")
    with pytest.raises(SimulatedCrash):
        run_notify()
    recover()
    result = run_notify(claim_token="worker-b")
    assert not result.called and result.state == EffectState.UNKNOWN
    assert deliveries(helpdesk) == 1
