"""The sweep asks about an unknown effect again every RECONCILE_EVERY_SECONDS while the
helpdesk cannot tell, but a retried effect that became unknown again is a new question:
asked at once, not held back by the look-up of its previous attempt. An effect is asked about only once its
settle time has passed (its "not found" proves nothing before), and then at once, even if an operator asked early."""

import datetime as dt

import pytest
from django.utils import timezone

from ledger.models import Effect, EffectState
from ticketagent.scheduling.recovery import reconcile_unknowns

from ..ledger.helpers import run_notify

pytestmark = pytest.mark.django_db(transaction=True)


def answered_unknown(sandbox, *, asked_before_intent: bool) -> Effect:
    sandbox.set_faults(error_next={"notify": 1}, error_status=408)
    effect = run_notify().effect
    assert (effect.state, effect.answered) == (EffectState.UNKNOWN, True)
    now = timezone.now()
    # its previous attempt was looked up 1 s ago; this attempt's intent came 0.5 s ago (or before the look-up)
    intent = now - dt.timedelta(seconds=0.5 if asked_before_intent else 2)
    Effect.objects.filter(pk=effect.pk).update(reconciled_at=now - dt.timedelta(seconds=1), intent_at=intent,
                                               outcome_at=intent, attempts=2)
    return effect


def test_a_retry_that_is_unknown_again_is_asked_at_once(sandbox):
    effect = answered_unknown(sandbox, asked_before_intent=True)
    assert reconcile_unknowns(timezone.now()) == 1
    effect.refresh_from_db()
    assert effect.state == EffectState.FAILED  # the 408 recorded nothing: it may be retried with the same key


def test_an_effect_asked_in_this_attempt_waits_before_being_asked_again(sandbox):
    effect = answered_unknown(sandbox, asked_before_intent=False)
    assert reconcile_unknowns(timezone.now()) == 0
    effect.refresh_from_db()
    assert effect.state == EffectState.UNKNOWN


def test_an_early_reconcile_now_does_not_hold_the_sweep_back_at_the_settle_time(sandbox):
    """An operator's "Reconcile now" before the settle time left the effect unknown ("not found", not trusted
    yet); once the settle time has passed the sweep asks at once, not RECONCILE_EVERY_SECONDS after the click."""
    sandbox.set_faults(error_next={"notify": 1}, error_status=503)
    effect = run_notify().effect
    assert (effect.state, effect.answered) == (EffectState.UNKNOWN, False)
    now = timezone.now()
    Effect.objects.filter(pk=effect.pk).update(intent_at=now - dt.timedelta(seconds=3),
                                               reconciled_at=now - dt.timedelta(seconds=2),
                                               settle_after=now - dt.timedelta(seconds=1))
    assert reconcile_unknowns(now) == 1
    effect.refresh_from_db()
    assert (effect.state, effect.verdict) == (EffectState.FAILED, "not_happened")


def test_an_effect_not_yet_settled_is_not_asked(sandbox):
    sandbox.set_faults(error_next={"notify": 1}, error_status=503)
    effect = run_notify().effect
    now = timezone.now()
    Effect.objects.filter(pk=effect.pk).update(settle_after=now + dt.timedelta(seconds=30))
    assert reconcile_unknowns(now) == 0
    effect.refresh_from_db()
    assert (effect.state, effect.reconciled_at) == (EffectState.UNKNOWN, None), "its 'not found' would prove nothing"
