"""Deliberately wrong gates, used only by the kill test's self-test to prove
that the harness detects a broken protocol (tests/killtest/broken_worker.py
puts one in a worker). Never wired into the product."""

from django.db import IntegrityError
from django.db.models import F
from django.utils import timezone

from ledger.actions import action_spec
from ledger.channels.base import CallDeadline
from ledger.faults import crash_point
from ledger.keys import idempotency_key, payload_hash, slot_for, summarize
from ledger.models import Effect, EffectState, EffectTransition
from tests.gate_run import GateResult
from ticketagent.channels.registry import get_channel


def _record(spec, key, slot, payload, p_hash, owner_task, owner_item, owner_step, claim_token, state, ref=""):
    effect, _ = Effect.objects.update_or_create(idempotency_key=key, defaults=dict(
        slot=slot, action=spec.name, effect_class=spec.effect_class, channel=spec.channel, state=state,
        owner_task=owner_task, owner_item=owner_item, owner_step=owner_step, claim_token=claim_token, payload=payload,
        payload_hash=p_hash, payload_summary=summarize(payload), intent_at=timezone.now(), external_ref=ref))
    return effect


def _prepare(action, payload, owner_task, owner_item, owner_step):
    spec = action_spec(action)
    p_hash = payload_hash(payload)
    key = idempotency_key(owner_task=owner_task, owner_item=owner_item, owner_step=owner_step, action=action,
                          p_hash=p_hash)
    slot = slot_for(owner_task=owner_task, owner_item=owner_item, owner_step=owner_step,
                    action=action) if spec.slotted else None
    return spec, p_hash, key, slot


def no_intent(*, action, payload, owner_task, owner_item, owner_step, claim_token, fence=None, authorized_by="",
              channel=None):
    """Calls first, records afterwards: a crash after the call forgets it happened."""
    spec, p_hash, key, slot = _prepare(action, payload, owner_task, owner_item, owner_step)
    existing = Effect.objects.filter(idempotency_key=key, state=EffectState.COMMITTED).first()
    if existing:
        return GateResult(effect=existing, state=existing.state, blocked="duplicate")
    crash_point("before_intent")
    result = (channel or get_channel(spec.channel)).perform(spec, payload, key, CallDeadline.within(60))
    crash_point("after_call")
    effect = _record(spec, key, slot, payload, p_hash, owner_task, owner_item, owner_step, claim_token,
                     EffectState.COMMITTED if result.state != EffectState.FAILED else EffectState.FAILED,
                     result.external_ref)
    crash_point("after_commit")
    return GateResult(effect=effect, state=effect.state, called=True)


def commit_before_call(*, action, payload, owner_task, owner_item, owner_step, claim_token, fence=None,
                       authorized_by="", channel=None):
    """Records success before calling: a crash before the call loses the effect."""
    spec, p_hash, key, slot = _prepare(action, payload, owner_task, owner_item, owner_step)
    existing = Effect.objects.filter(idempotency_key=key).first()
    if existing:
        return GateResult(effect=existing, state=existing.state, blocked="duplicate")
    crash_point("before_intent")
    effect = _record(spec, key, slot, payload, p_hash, owner_task, owner_item, owner_step, claim_token,
                     EffectState.COMMITTED)
    crash_point("after_intent")
    (channel or get_channel(spec.channel)).perform(spec, payload, key, CallDeadline.within(60))
    crash_point("after_call")
    return GateResult(effect=effect, state=effect.state, called=True)


def _transition(effect: Effect, from_state: str, event: str, actor: str) -> None:
    EffectTransition.objects.create(effect=effect, event=event, from_state=from_state, to_state=effect.state,
                                    actor=actor)


def unchecked_lease(*, action, payload, owner_task, owner_item, owner_step, claim_token, fence=None,
                    authorized_by="", channel=None):
    """Intent, call, outcome in the right order, each phase one statement in
    autocommit, and never a look at the lease: a worker that wakes from a
    pause after its intent committed calls anyway, though another worker
    has taken the item over and, after a look-up said "not found", made the
    call again."""
    spec, p_hash, key, slot = _prepare(action, payload, owner_task, owner_item, owner_step)
    existing = Effect.objects.filter(idempotency_key=key).first()
    if existing is not None and existing.state != EffectState.FAILED:
        return GateResult(effect=existing, state=existing.state, blocked="duplicate")
    crash_point("before_intent")
    if existing is None:
        try:
            effect = Effect.objects.create(
                idempotency_key=key, slot=slot, action=spec.name, effect_class=spec.effect_class,
                channel=spec.channel, owner_task=owner_task, owner_item=owner_item, owner_step=owner_step,
                claim_token=claim_token, payload=payload, payload_hash=p_hash, payload_summary=summarize(payload),
                intent_at=timezone.now())
        except IntegrityError:
            taken = Effect.objects.filter(idempotency_key=key).first() or Effect.objects.get(slot=slot)
            return GateResult(effect=taken, state=taken.state, blocked="duplicate")
        _transition(effect, "", "EFFECT_INTENT", claim_token)
    else:
        Effect.objects.filter(pk=existing.pk).update(state=EffectState.INTENT, attempts=F("attempts") + 1,
                                                     claim_token=claim_token, intent_at=timezone.now())
        effect = Effect.objects.get(pk=existing.pk)
        _transition(effect, EffectState.FAILED, "EFFECT_RETRY", claim_token)
    crash_point("after_intent")
    result = (channel or get_channel(spec.channel)).perform(spec, payload, key, CallDeadline.within(60))
    crash_point("after_call")
    state = result.state if result.state in (EffectState.COMMITTED, EffectState.FAILED) else EffectState.UNKNOWN
    Effect.objects.filter(pk=effect.pk, attempts=effect.attempts, state=EffectState.INTENT).update(
        state=state, external_ref=result.external_ref or "", outcome_at=timezone.now(), answered=result.answered,
        last_error=result.error or "")
    effect.refresh_from_db()
    if effect.state == state:
        _transition(effect, EffectState.INTENT, "EFFECT_COMMITTED" if state == EffectState.COMMITTED
                    else "EFFECT_OUTCOME", claim_token)
    crash_point("after_commit")
    return GateResult(effect=effect, state=effect.state, called=True)


MISORDERED = {"no-intent": no_intent, "commit-before-call": commit_before_call}  # caught by SIGKILLs alone
GATES = {**MISORDERED, "unchecked-lease": unchecked_lease}  # caught only when a worker wakes up late
