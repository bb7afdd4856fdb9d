"""The dedupe gate: the one way an effect reaches the outside world.

    phase 1 (transaction): fence check; insert the `intent` row with its
            idempotency key and slot -- or find the row that holds them
            and stop there (a blocked duplicate, recorded as a row);
    call    (no transaction): the channel, with the key passed downstream;
    phase 2 (transaction): record the outcome, only if this caller still
            holds the attempt (fencing: an orphaned worker cannot commit);
            while the caller's fence holds, its own recovery point (`then`)
            commits in the same transaction.

On PostgreSQL each phase may be one statement in autocommit instead: with a
fence given as SQL (`ledger.statements.Fence`), and in phase 2 with the
caller's writes riding on the outcome (`Rider`) -- the same rows, the same
"together or not at all" (`ledger/statements.py` holds the SQL).

A crash between the phases leaves an `intent` row; recovery turns it into
`unknown` and reconcile or review resolves it. Nothing is ever retried on a
guess.
"""

from collections.abc import Callable
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from ledger.actions import action_spec
from ledger.channels.base import CallResult, Channel, Expired, call_deadline, committed, unknown
from ledger.channels.registry import get_channel
from ledger.faults import crash_point
from ledger.keys import Intent, summarize
from ledger.models import SLOTTED_CLASSES, BlockedDuplicate, Effect, EffectState
from ledger.signals import effect_changed
from ledger.statements import (
    SETTLE_MARGIN_SECONDS,
    Fence,
    Rider,
    insert_intent,
    record_outcome,
    record_transition,
)


class Fenced(Exception):
    """Raised by a caller's fence: it no longer holds the work the effect belongs to."""


class OutcomeRefused(Exception):
    """Phase 2 was rolled back: the caller's folded fence held, the row was no longer its attempt."""


class ApprovalRequired(Exception):
    """An irreversible action was asked for without a recorded approval."""


@dataclass(frozen=True)
class GateResult:
    effect: Effect
    state: str
    called: bool = False
    # "", "duplicate", "conflict", "fenced" (the caller lost its claim meanwhile) or "expired" (the
    # caller's deadline came before the request could leave: nothing was sent, the row is still `intent`)
    blocked: str = ""
    answers: tuple | None = None  # a `Rider`'s answers, when it was written with the outcome


def _folds(fence) -> bool:
    return isinstance(fence, Fence)


def _record_blocked(existing: Effect, kind: str, intent: Intent) -> None:
    BlockedDuplicate.objects.create(
        effect=existing, kind=kind, idempotency_key=intent.key, payload_hash=intent.p_hash,
        payload_summary=summarize(intent.payload), owner_task=intent.owner_task, owner_item=intent.owner_item,
        owner_step=intent.owner_step, lease_token=intent.lease_token, existing_state=existing.state,
    )
    effect_changed.send(
        sender=Effect, effect=existing, event="EFFECT_BLOCKED", actor=intent.lease_token,
        note=f"{kind}: the {existing.state} effect already holds this {'key' if kind == 'duplicate' else 'slot'}",
        from_state=existing.state,
    )


def _retriable(effect: Effect) -> bool:
    """A row whose previous attempt provably did not happen may be tried again."""
    return effect.state == EffectState.FAILED


def effect_prepare(*, action: str, payload: dict, owner_task: str, owner_item: str, owner_step: str,
                   lease_token: str, authorized_by: str = "") -> Intent:
    """What phase 1 will record, with its key and slot (no database work)."""
    spec = action_spec(action)
    if spec.needs_approval and not authorized_by:
        raise ApprovalRequired(f"{action} is irreversible and needs a recorded approval")
    return Intent.build(spec=spec, payload=payload, owner_task=owner_task, owner_item=owner_item,
                        owner_step=owner_step, lease_token=lease_token, authorized_by=authorized_by)


def effect_run(
    *,
    action: str,
    payload: dict,
    owner_task: str,
    owner_item: str,
    owner_step: str,
    lease_token: str,
    fence: Callable[[], None] | None = None,
    authorized_by: str = "",
    channel: Channel | None = None,
    then: Callable[[Effect], None] | None = None,
) -> GateResult:
    """Run one effect through the protocol. See the module docstring.

    `fence()` runs first in both phases' transactions and raises `Fenced`
    when the caller has lost its claim (e.g. an item's lease); in phase 1
    that stops the effect, in phase 2 the outcome is still recorded (it is
    the truth) but `then` does not run and the result says "fenced".
    `then(effect)` runs inside phase 2's transaction after the outcome is
    recorded: the caller's recovery point commits with the outcome, or
    neither does.
    """
    intent = effect_prepare(action=action, payload=payload, owner_task=owner_task, owner_item=owner_item,
                            owner_step=owner_step, lease_token=lease_token, authorized_by=authorized_by)
    effect, blocked = intent_commit(intent, fence)
    return effect_call(intent, effect, blocked, fence=fence, channel=channel, then=then)


def intent_commit(intent: Intent, fence: Callable[[], None] | None = None) -> tuple[Effect, str]:
    """Phase 1 committed by itself: `intent_record` in a transaction -- or,
    when the fence folds (a `Fence`, on PostgreSQL), one statement in
    autocommit: the `intent` row and its transition on the condition of the
    fence. If that wrote nothing, the fence or a unique index refused it:
    `intent_record` in a transaction then tells which (the fence raises; a
    taken key or slot is retried or blocked, as always)."""
    if _folds(fence):
        crash_point("before_intent")
        effect = insert_intent(intent, timezone.now(), fence)
        if effect is not None:
            return effect, ""
    with transaction.atomic():
        return intent_record(intent, fence)


def effect_call(intent: Intent, effect: Effect, blocked: str = "", *, fence: Callable[[], None] | None = None,
                channel: Channel | None = None, then: Callable[[Effect], None] | None = None,
                outcome_fence: Callable[[CallResult], None] | None = None,
                fold: Callable[[CallResult], tuple[Fence, Rider] | None] | None = None,
                deadline: float | None = None) -> GateResult:
    """After phase 1 has committed (`intent_record`, in the gate's transaction or
    the caller's): the call and phase 2. A blocked intent is answered as it is.

    `outcome_fence(result)`, when given, is phase 2's fence instead of
    `fence`, told the call's result: a caller may fold its own writes for
    that result into its fence check (move its recovery point on the
    condition that it still holds its claim: one statement instead of two).
    Those writes commit with the outcome or not at all: if the outcome then
    cannot be recorded (the row is no longer this caller's attempt, though
    its fence held), phase 2 is rolled back and `OutcomeRefused` raised.

    `fold(result)`, when given, may instead answer a `Fence` and a `Rider`
    (on PostgreSQL): phase 2 is then one statement in autocommit -- the
    fence, the outcome with its transition, and the rider's writes when both
    held (the result's `answers`); the same "or not at all" holds, and
    `then` does not run. When it answers None, phase 2 is as above.

    `deadline` (monotonic seconds): when the caller's claim may end. The
    call must be over by then; a channel asks it right before a request's
    bytes leave (`CallDeadline.room_to_send`). A call stopped by it before
    any write left answers `blocked="expired"`: no outcome is recorded, the
    caller hands its work back (the row stays `intent` under its token)."""
    if blocked:
        return GateResult(effect=effect, state=effect.state, blocked=blocked)
    crash_point("after_intent")

    # --- the call: no transaction is open here ---------------------------------
    result = _call(channel or get_channel(intent.spec.channel), intent, effect, deadline)
    if result is None:
        return GateResult(effect=effect, state=effect.state, blocked="expired")
    crash_point("after_call")

    # --- phase 2: the outcome, fenced by the lease token -------------------------
    folded = fold(result) if fold is not None else None
    if folded is not None:
        ours, answers = _outcome_with_rider(effect, intent, result, *folded)
    else:
        ours, answers = _phase_outcome(effect, intent, result, fence, then, outcome_fence), None
    crash_point("after_commit")
    return GateResult(effect=effect, state=effect.state, called=True, blocked="" if ours else "fenced",
                      answers=answers)


def _call(channel: Channel, intent: Intent, effect: Effect, deadline: float | None) -> CallResult | None:
    """The channel's call under the caller's deadline; None when the deadline
    stopped it before anything was sent.

    A retry (attempt > 1) on a channel with a look-up looks the key up first
    and does not write if it is found: on a system that ignores keys a late
    write of an earlier attempt and this one cannot both land (unless they
    fall within the look-up's own round trip); on one that honours them it
    costs one read per retry, and retries are rare."""
    with call_deadline(deadline) as call:
        try:
            if effect.attempts > 1 and channel.supports_lookup:
                call.room_to_send(channel.max_call_seconds, "the look-up before a retry")
                seen = channel.lookup(intent.key, intent.payload)
                if seen.found:
                    return committed(seen.external_ref or f"found before retrying: {seen.detail}")
            return channel.perform(intent.spec, intent.payload, intent.key)
        except Expired as exc:
            if call.writes_sent:
                return unknown(f"{exc} (after {call.writes_sent} write(s) of this action had left)", answered=False)
            return None


def intent_record(intent: Intent, fence: Callable[[], None] | None = None) -> tuple[Effect, str]:
    """Phase 1, inside the caller's transaction: the fence, then the `intent`
    row with its transition -- or the row that holds the key or the slot
    (retried, or a blocked duplicate / conflict). The call may only be made
    once that transaction has committed (`effect_call`). A caller whose own
    write in the same transaction already checked its fence (a step's
    recovery point: "chained intents") passes no fence."""
    crash_point("before_intent")
    if fence is not None:
        fence()
    # The common case first: a new key and a new slot, one INSERT … ON
    # CONFLICT DO NOTHING: no look-up, no savepoint, and a refusal does not
    # abort the transaction. Under PostgreSQL a concurrent uncommitted insert
    # of the same key or slot makes it wait: it inserts nothing once that row
    # commits, and goes through if it rolls back.
    effect = insert_intent(intent, timezone.now())
    if effect is None:
        return _phase_intent_general(intent)
    return effect, ""


def _phase_outcome(effect: Effect, intent: Intent, result, fence, then, outcome_fence=None) -> bool:
    """Record the call's outcome if the row is still this caller's attempt.
    True when it was and the caller's fence held (so `then` ran)."""
    if then is None and outcome_fence is None and _folds(fence):
        row = record_outcome(effect, intent, result, fence, settle_seconds=settle_seconds(intent, result))
        if row is None:
            _outcome_not_ours(effect, intent, result)
            return False
        return bool(row[1])
    with transaction.atomic():
        held = True
        if fence is not None or outcome_fence is not None:
            # Locks the caller's row first: the same order as a take-over
            # (the item, then its effects), so the two cannot deadlock.
            try:
                outcome_fence(result) if outcome_fence is not None else fence()
            except Fenced:
                held = False
        updated = record_outcome(effect, intent, result, settle_seconds=settle_seconds(intent, result))
        if not updated and held and outcome_fence is not None:
            raise OutcomeRefused(f"effect {effect.pk}: the caller's fence held but the row is no longer its "
                                 "attempt; nothing of phase 2 is kept")
        if not updated:
            _outcome_not_ours(effect, intent, result)
            return False
        if held and then is not None:
            then(effect)
        return held


def _outcome_with_rider(effect: Effect, intent: Intent, result, fence: Fence, rider: Rider
                        ) -> tuple[bool, tuple | None]:
    """Phase 2 as one statement: the fence, the outcome and the rider's
    writes. (True, the rider's answers) when the outcome was written and the
    fence held; (False, None) when the fence did not hold (the outcome, the
    truth, written if the row was still ours: `record_outcome`)."""
    written, held, *answers = record_outcome(effect, intent, result, fence, rider,
                                             settle_seconds=settle_seconds(intent, result))
    if written is None and held:
        raise OutcomeRefused(f"effect {effect.pk}: the caller's fence held but the row is no longer its "
                             "attempt; nothing of phase 2 is kept")
    if written is None:
        _outcome_not_ours(effect, intent, result)
        return False, None
    return (True, tuple(answers)) if held else (False, None)


def settle_seconds(intent: Intent, result: CallResult) -> float | None:
    """For an unknown the system did not answer (it may land still): how long
    after now a look-up's "not found" can be trusted -- the channel's
    in-flight bound and a margin. None for every other outcome."""
    if result.state != EffectState.UNKNOWN or result.answered:
        return None
    return get_channel(intent.spec.channel).in_flight_seconds + SETTLE_MARGIN_SECONDS


def _outcome_not_ours(effect: Effect, intent: Intent, result) -> None:
    """Our lease was taken over while we were calling: the new owner's
    recovery already turned the row into `unknown`. Leave the truth to
    reconcile; note what we saw."""
    effect.refresh_from_db()
    effect_changed.send(sender=Effect, effect=effect, event="EFFECT_FENCED", actor=intent.lease_token,
                        note=f"fenced lease token saw {result.state}: {result.error or result.external_ref}",
                        from_state=effect.state)


def _by_slot(slot: str) -> Q:
    """Rows holding a slot. Only `once`/`irreversible` rows have one, so the
    class condition changes nothing in the answer -- but it is the condition
    of the partial unique index on slot, which PostgreSQL can only use when
    the query states it: without it every look-up by slot read the whole
    ledger (~100 ms at 300k effects; docs/benchmarks.md)."""
    return Q(slot=slot, effect_class__in=SLOTTED_CLASSES)


def _retry(existing: Effect, intent: Intent, now) -> Effect:
    """The same row and key, attempt + 1, back to `intent`."""
    from_state = existing.state
    existing.state = EffectState.INTENT
    existing.attempts += 1
    existing.lease_token = intent.lease_token
    existing.intent_at = now
    existing.outcome_at = existing.answered = existing.settle_after = None
    existing.last_error = ""
    existing.authorized_by = intent.authorized_by or existing.authorized_by
    existing.save()
    record_transition(existing, from_state, "EFFECT_RETRY", actor=intent.lease_token,
                      note=f"attempt {existing.attempts} with the same key")
    return existing


def _phase_intent_general(intent: Intent) -> tuple[Effect, str]:
    """The fast path's INSERT was refused: find the row that holds the key or
    the slot, and retry it, or block this intent as a duplicate or conflict
    (in the same transaction: the refusal did not abort it).

    That row is always there. A unique index refuses an INSERT only for a
    committed row (PostgreSQL, READ COMMITTED: an INSERT that meets an
    uncommitted row waits for its transaction, fails if it commits and goes
    through if it rolls back; SQLite: one writer at a time, so every other
    row is committed), this transaction starts after that refusal and reads
    what is committed, and ledger rows are never deleted. So there is no
    "insert again" here: if neither look-up finds a row, the refusal came
    from something the gate does not know, and it is raised, never hidden
    (docs/testing.md)."""
    existing = Effect.objects.select_for_update(no_key=True).filter(idempotency_key=intent.key).first()
    if existing is not None:
        if _retriable(existing):
            return _retry(existing, intent, timezone.now()), ""
        _record_blocked(existing, BlockedDuplicate.Kind.DUPLICATE, intent)
        return existing, BlockedDuplicate.Kind.DUPLICATE
    if intent.slot is not None:
        existing = Effect.objects.select_for_update(no_key=True).filter(_by_slot(intent.slot)).first()
    if existing is None:
        raise IntegrityError(f"the ledger refused the intent {intent.key} but holds no row with its key "
                             "or slot")
    # Same slot, other payload: a regenerated decision must not become a
    # second action. Blocked and shown, whatever the state.
    _record_blocked(existing, BlockedDuplicate.Kind.CONFLICT, intent)
    return existing, BlockedDuplicate.Kind.CONFLICT
