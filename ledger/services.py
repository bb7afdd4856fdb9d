"""State changes of effects outside the gate: recovery, reconcile, review."""

import datetime as dt

from django.db import transaction
from django.utils import timezone

from ledger.channels.registry import get_channel
from ledger.models import Effect, EffectState, ResolvedBy, Verdict
from ledger.statements import record_transition

# Extra time past a channel's own timeouts before an unknown effect is
# reconciled: a call made by a worker that is still alive (an orphaned
# work-horse) must have finished or given up before we ask "did it happen?".
RECONCILE_MARGIN_SECONDS = 2.0


class ReviewError(Exception):
    """A review verdict that cannot be applied (wrong state, no reason)."""


def effects_mark_unknown(*, owner_item: str, actor: str, note: str) -> list[Effect]:
    """Recovery: every `intent` of a dead holder becomes `unknown`.

    We cannot tell "killed before the call" from "killed after the call".
    Must run inside the transaction that takes the owner's lease away, so the
    old holder's commit (filtered on state=intent) can no longer land.
    """
    changed = []
    with transaction.atomic():
        intents = Effect.objects.select_for_update(no_key=True).filter(owner_item=owner_item, state=EffectState.INTENT)
        for effect in intents:
            effect.state = EffectState.UNKNOWN
            effect.last_error = note
            effect.save(update_fields=["state", "last_error", "updated_at"])
            record_transition(effect, EffectState.INTENT, "EFFECT_UNKNOWN", actor=actor, note=note)
            changed.append(effect)
    return changed


def reconcile_not_before(effect: Effect) -> dt.datetime:
    """When a look-up's "not found" can be trusted.

    A call the system answered (`answered`: a 503, a reset after the status
    line) cannot land later: at once, on its first two attempts; from the
    third one answered again, 1, 2, 4 … s (up to the in-flight bound),
    so a helpdesk that keeps refusing is not asked in a tight loop. Any other
    unknown (a timeout, a connection dropped before any answer, a worker
    killed mid-call) may still be in flight: not before the channel's
    longest call + a margin after the intent.
    """
    bound = get_channel(effect.channel).max_call_seconds + RECONCILE_MARGIN_SECONDS
    if effect.answered and effect.outcome_at:
        backoff = 0.0 if effect.attempts <= 2 else min(2.0 ** (effect.attempts - 3), bound)
        return effect.outcome_at + dt.timedelta(seconds=backoff)
    return effect.intent_at + dt.timedelta(seconds=bound)


def effect_reconcile(*, effect_id: int, actor: str = "reconcile", force: bool = False) -> Effect:
    """Ask the channel whether the unknown effect happened.

    found  -> committed (resolved_by reconcile);
    absent -> failed, verdict "did not happen": the item may retry with the same key;
    anything else stays unknown for review, with the answer recorded.
    """
    effect = Effect.objects.get(pk=effect_id)
    if effect.state != EffectState.UNKNOWN:
        return effect
    if not force and timezone.now() < reconcile_not_before(effect):
        return effect
    answer = get_channel(effect.channel).lookup(effect.idempotency_key, effect.payload)  # no transaction open
    with transaction.atomic():
        effect = Effect.objects.select_for_update(no_key=True).get(pk=effect_id)
        if effect.state != EffectState.UNKNOWN:
            return effect
        now = timezone.now()
        effect.last_reconcile = answer.detail[:300]
        effect.reconciled_at = now
        if answer.found is True:
            effect.state = EffectState.COMMITTED
            effect.resolved_by = ResolvedBy.RECONCILE
            effect.verdict = Verdict.HAPPENED
            effect.external_ref = answer.external_ref[:200]
            effect.save()
            record_transition(effect, EffectState.UNKNOWN, "EFFECT_RECONCILED", actor=actor, note=answer.detail)
        elif answer.found is False:
            effect.state = EffectState.FAILED
            effect.resolved_by = ResolvedBy.RECONCILE
            effect.verdict = Verdict.NOT_HAPPENED
            effect.save()
            record_transition(effect, EffectState.UNKNOWN, "EFFECT_RECONCILED", actor=actor, note=answer.detail)
        else:
            effect.save(update_fields=["last_reconcile", "reconciled_at", "updated_at"])
            record_transition(effect, EffectState.UNKNOWN, "EFFECT_RECONCILE_UNANSWERED", actor=actor,
                              note=answer.detail)
    return effect


def effect_review(*, effect_id: int, verdict: str, reason: str, actor: str) -> Effect:
    """A person's recorded verdict on an unknown effect: happened, did not happen (retry) or skip."""
    reason = (reason or "").strip()
    if not reason:
        raise ReviewError("a reason is required for every review verdict")
    if verdict not in (Verdict.HAPPENED, Verdict.NOT_HAPPENED, Verdict.SKIP):
        raise ReviewError(f"unknown verdict {verdict!r}; choose happened, not_happened or skip")
    with transaction.atomic():
        effect = Effect.objects.select_for_update(no_key=True).get(pk=effect_id)
        if effect.state != EffectState.UNKNOWN:
            raise ReviewError(f"this effect is {effect.state}, not unknown: it was already resolved")
        effect.state = {
            Verdict.HAPPENED: EffectState.COMMITTED,
            Verdict.NOT_HAPPENED: EffectState.FAILED,
            Verdict.SKIP: EffectState.SKIPPED,
        }[verdict]
        effect.resolved_by = ResolvedBy.REVIEW
        effect.verdict = verdict
        effect.reviewed_by = actor
        effect.review_reason = reason[:2000]
        effect.reviewed_at = timezone.now()
        effect.save()
        record_transition(effect, EffectState.UNKNOWN, "REVIEWED", actor=actor, note=f"{verdict}: {reason}")
    return effect
