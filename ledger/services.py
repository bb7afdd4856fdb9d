"""State changes of effects outside the gate: recovery, reconcile, review."""

import datetime as dt

from django.db import transaction
from django.utils import timezone

from ledger.channels import get_channel
from ledger.clock import SETTLE_MARGIN_SECONDS, db_now
from ledger.models import Effect, EffectState, ResolvedBy, Verdict
from ledger.statements import record_transition


class ReviewError(Exception):
    """A review verdict that cannot be applied (wrong state, no reason)."""


def effects_mark_unknown(*, owner_item: str, actor: str, note: str, claim_ended_at: dt.datetime | None = None
                         ) -> list[Effect]:
    """Recovery: every `intent` of a holder whose claim ended becomes `unknown`.

    We cannot tell "stopped before the call" from "stopped after the call".
    Must run inside the transaction that takes the owner's claim away, so the
    old holder's commit (filtered on state=intent) can no longer land.

    `claim_ended_at` (the database's clock): the latest moment the old holder
    could have believed its claim valid -- its lease deadline. Until that
    time plus the channel's longest call and in-flight bound, it may still be
    calling, or its request may still land: the settle time, before which a
    look-up's "not found" proves nothing (`reconcile_not_before`).
    """
    changed = []
    with transaction.atomic():
        ended = max(claim_ended_at, db_now()) if claim_ended_at is not None else db_now()
        intents = Effect.objects.select_for_update(no_key=True).filter(owner_item=owner_item, state=EffectState.INTENT)
        for effect in intents:
            channel = get_channel(effect.channel)
            effect.state = EffectState.UNKNOWN
            effect.last_error = note
            effect.settle_after = ended + dt.timedelta(
                seconds=channel.max_call_seconds + channel.in_flight_seconds + SETTLE_MARGIN_SECONDS)
            effect.save(update_fields=["state", "last_error", "settle_after", "updated_at"])
            record_transition(effect, EffectState.INTENT, "EFFECT_UNKNOWN", actor=actor, note=note)
            changed.append(effect)
    return changed


def effect_not_sent(*, effect_id: int, claim_token: str, actor: str, note: str) -> bool:
    """Inside the caller's transaction: an `intent` whose call provably never
    left (its claim's holder stopped before sending: its claim was in doubt) becomes
    `failed` -- the next attempt retries it with the same key. Only while the
    row is still that claim's intent; True when it was."""
    effect = (Effect.objects.select_for_update(no_key=True)
              .filter(pk=effect_id, state=EffectState.INTENT, claim_token=claim_token).first())
    if effect is None:
        return False
    effect.state = EffectState.FAILED
    effect.last_error = note[:4000]
    effect.answered = False
    effect.outcome_at = timezone.now()
    effect.save(update_fields=["state", "last_error", "answered", "outcome_at", "updated_at"])
    record_transition(effect, EffectState.INTENT, "EFFECT_FAILED", actor=actor, note=note)
    return True


def reconcile_not_before(effect: Effect) -> dt.datetime:
    """The one rule for when a look-up's "not found" can be trusted (compare
    with `db_now()`, taken before the look-up is sent). Every path that
    reconciles goes through `effect_reconcile`, which applies it.

    An unknown with a settle time (a holder whose claim ended mid-call, a
    call without an answer, a 5xx -- a gateway in front of the helpdesk may
    still hand the request upstream): not before it, when no caller can still
    be calling and nothing it sent can still land. A call the system itself
    answered (a 408, a reset after a 2xx status line) cannot land later: at
    once, on its first two attempts; from the third one answered again, 1, 2,
    4 … s (up to the in-flight bound), so a helpdesk that keeps refusing is not
    asked in a tight loop. A row from before settle times were kept: the
    channel's longest call and in-flight bound past its intent.
    """
    if effect.settle_after is not None:
        return effect.settle_after
    channel = get_channel(effect.channel)
    bound = channel.max_call_seconds + channel.in_flight_seconds + SETTLE_MARGIN_SECONDS
    if effect.answered and effect.outcome_at:
        backoff = 0.0 if effect.attempts <= 2 else min(2.0 ** (effect.attempts - 3), bound)
        return effect.outcome_at + dt.timedelta(seconds=backoff)
    return effect.intent_at + dt.timedelta(seconds=bound)


NOT_YET_TRUSTED = "asked before its settle time, so not trusted: a write may still land; it stays unknown"


def effect_reconcile(*, effect_id: int, actor: str = "reconcile") -> Effect:
    """Ask the channel whether the unknown effect happened, at any time.

    found  -> committed (resolved_by reconcile): a write that is found has landed, whenever it is asked;
    absent -> failed, verdict "did not happen" (the item may retry with the same key) -- only when the
              look-up was sent at or after `reconcile_not_before()`; asked earlier, the effect stays unknown
              and the answer is kept as evidence, since a write may still land;
    anything else stays unknown for review, with the answer recorded.
    """
    effect = Effect.objects.get(pk=effect_id)
    if effect.state != EffectState.UNKNOWN:
        return effect
    asked_at = db_now()  # before the look-up leaves: a "not found" describes no earlier moment than this
    answer = get_channel(effect.channel).lookup(effect.idempotency_key, effect.payload)  # no transaction open
    with transaction.atomic():
        effect = Effect.objects.select_for_update(no_key=True).get(pk=effect_id)
        if effect.state != EffectState.UNKNOWN:
            return effect
        effect.last_reconcile = answer.detail[:300]
        effect.reconciled_at = timezone.now()
        trusted = answer.found is True or (answer.found is False and asked_at >= reconcile_not_before(effect))
        if trusted:
            effect.state = EffectState.COMMITTED if answer.found else EffectState.FAILED
            effect.verdict = Verdict.HAPPENED if answer.found else Verdict.NOT_HAPPENED
            effect.resolved_by = ResolvedBy.RECONCILE
            if answer.found:
                effect.external_ref = answer.external_ref[:200]
            effect.save()
            record_transition(effect, EffectState.UNKNOWN, "EFFECT_RECONCILED", actor=actor, note=answer.detail)
            return effect
        if answer.found is False:
            effect.last_reconcile = f"{answer.detail[:300 - len(NOT_YET_TRUSTED) - 3]} — {NOT_YET_TRUSTED}"
        effect.save(update_fields=["last_reconcile", "reconciled_at", "updated_at"])
        record_transition(effect, EffectState.UNKNOWN, "EFFECT_RECONCILE_UNANSWERED", actor=actor,
                          note=effect.last_reconcile if answer.found is False else answer.detail)
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
