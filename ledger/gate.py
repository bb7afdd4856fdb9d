"""The dedupe gate: the one way an effect reaches the outside world, in three calls.

    intent_record(intent)            inside the caller's transaction: the
                                     `intent` row with its idempotency key and
                                     slot -- or the row that already holds
                                     them (retried if it provably did not
                                     happen, else a blocked duplicate or
                                     conflict, recorded as a row);
    effect_perform(intent, effect, deadline=...)
                                     with no transaction open: the channel's
                                     call, the key passed downstream, the
                                     caller's deadline (its claim known valid
                                     until then) asked before it leaves;
    outcome_record(intent, effect, result)
                                     inside the caller's transaction: the
                                     outcome, only if the row is still this
                                     caller's attempt (its token): an
                                     orphaned caller cannot commit.

The caller owns the transactions: its own checks and writes (its claim, its
recovery point) sit beside the first and the third call in its own
`transaction.atomic()` block, and commit with them or not at all.

A crash between the calls leaves an `intent` row; recovery turns it into
`unknown` and reconcile or review resolves it. Nothing is ever retried on a
guess.
"""

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from ledger.actions import action_spec
from ledger.channels import get_channel
from ledger.channels.base import CallDeadline, CallResult, Channel, Expired, LookupResult, committed, unknown
from ledger.clock import SETTLE_MARGIN_SECONDS
from ledger.faults import crash_point
from ledger.keys import Intent
from ledger.models import SLOTTED_CLASSES, BlockedDuplicate, Effect, EffectState, Verdict
from ledger.signals import effect_changed
from ledger.statements import insert_intent, record_outcome, record_transition


class ApprovalRequired(Exception):
    """An irreversible action was asked for without a recorded approval."""


class TransactionMisuse(RuntimeError):
    """A gate call made inside a transaction it must not be in, or outside the one it needs."""


@dataclass(frozen=True)
class Recorded:
    """What `intent_record` found: the row to call (`blocked` empty), or the row that holds the key or slot."""

    effect: Effect
    blocked: str = ""  # "", "duplicate" (the key is taken) or "conflict" (the slot is, by another payload)


def intent_prepare(*, action: str, payload: dict, owner_task: str, owner_item: str, owner_step: str,
                   claim_token: str, authorized_by: str = "", summary: str = "") -> Intent:
    """What `intent_record` will write, with its key and slot (no database work)."""
    spec = action_spec(action)
    if spec.needs_approval and not authorized_by:
        raise ApprovalRequired(f"{action} is irreversible and needs a recorded approval")
    return Intent.build(spec=spec, payload=payload, owner_task=owner_task, owner_item=owner_item,
                        owner_step=owner_step, claim_token=claim_token, authorized_by=authorized_by, summary=summary)


def _in_transaction() -> bool:
    """A transaction of the caller's is open (a test case's own wrapping block does not count): a durable
    block, which Django refuses inside another one but lets a test case's hold, cannot open."""
    try:
        with transaction.atomic(durable=True):
            return False
    except RuntimeError:
        return True


# --- 1. the intent ---------------------------------------------------------------------------


def intent_record(intent: Intent) -> Recorded:
    """Inside the caller's transaction: the `intent` row and its transition --
    or the row that holds the key or the slot. The call may be made only once
    that transaction has committed, and only when nothing is `blocked`."""
    if not _in_transaction():
        raise TransactionMisuse("intent_record runs inside the caller's transaction.atomic()")
    crash_point("before_intent")
    # The common case first: a new key and a new slot, one INSERT … ON
    # CONFLICT DO NOTHING: no look-up, no savepoint, and a refusal does not
    # abort the transaction. A concurrent uncommitted insert of the same key
    # or slot makes it wait: it inserts nothing once that row commits, and
    # goes through if it rolls back.
    effect = insert_intent(intent, timezone.now())
    if effect is not None:
        return Recorded(effect)
    return _held_already(intent)


def _held_already(intent: Intent) -> Recorded:
    """The INSERT was refused: find the row that holds the key or the slot,
    and retry it, or block this intent as a duplicate or conflict (in the
    same transaction: the refusal did not abort it).

    That row is always there. A unique index refuses an INSERT only for a
    committed row (READ COMMITTED: an INSERT that meets an uncommitted row
    waits for its transaction, fails if it commits and goes through if it
    rolls back), this statement starts after that refusal and reads what is
    committed, and ledger rows are never deleted. So there is no "insert
    again" here: if neither look-up finds a row, the refusal came from
    something the gate does not know, and it is raised, never hidden."""
    existing = Effect.objects.select_for_update(no_key=True).filter(idempotency_key=intent.key).first()
    if existing is not None:
        if existing.state == EffectState.FAILED:  # its last attempt provably did not happen
            return Recorded(_retry(existing, intent))
        _record_blocked(existing, BlockedDuplicate.Kind.DUPLICATE, intent)
        return Recorded(existing, BlockedDuplicate.Kind.DUPLICATE)
    if intent.slot is not None:
        existing = Effect.objects.select_for_update(no_key=True).filter(_by_slot(intent.slot)).first()
    if existing is None:
        raise IntegrityError(f"the ledger refused the intent {intent.key} but holds no row with its key or slot")
    if existing.state == EffectState.FAILED:
        # The slot's payload provably did not happen (e.g. an item moved to a
        # newer playbook decides again): the new payload takes its row, once.
        return Recorded(_retry(existing, intent))
    # Same slot, other payload: a regenerated decision must not become a
    # second action. Blocked and shown, whatever else its state.
    _record_blocked(existing, BlockedDuplicate.Kind.CONFLICT, intent)
    return Recorded(existing, BlockedDuplicate.Kind.CONFLICT)


def _by_slot(slot: str) -> Q:
    """Rows holding a slot. Only `once`/`irreversible` rows have one, so the
    class condition changes nothing in the answer -- but it is the condition
    of the partial unique index on slot, which PostgreSQL can only use when
    the query states it (without it every look-up by slot read the whole ledger)."""
    return Q(slot=slot, effect_class__in=SLOTTED_CLASSES)


def _retry(existing: Effect, intent: Intent) -> Effect:
    """The same row, attempt + 1, back to `intent` under this caller's token: with the same key, or -- the row
    holds the slot with a payload that did not happen -- with this intent's payload and key."""
    from_state = existing.state
    note = f"attempt {existing.attempts + 1} with the same key"
    if existing.idempotency_key != intent.key:
        note = (f"attempt {existing.attempts + 1} with a new payload and key: the slot's earlier payload "
                f"({existing.idempotency_key[:12]}) did not happen")
        existing.idempotency_key, existing.payload, existing.payload_hash = intent.key, intent.payload, intent.p_hash
        existing.payload_summary = intent.summary
        existing.authorized_by = ""  # an approval of the earlier payload is not one of this
    existing.state = EffectState.INTENT
    existing.attempts += 1
    existing.claim_token = intent.claim_token
    existing.intent_at = timezone.now()
    existing.outcome_at = existing.answered = existing.settle_after = None
    existing.last_error = ""
    existing.authorized_by = intent.authorized_by or existing.authorized_by
    existing.save()
    record_transition(existing, from_state, "EFFECT_RETRY", actor=intent.claim_token, note=note)
    return existing


def _record_blocked(existing: Effect, kind: str, intent: Intent) -> None:
    BlockedDuplicate.objects.create(
        effect=existing, kind=kind, idempotency_key=intent.key, payload_hash=intent.p_hash,
        payload_summary=intent.summary, owner_task=intent.owner_task, owner_item=intent.owner_item,
        owner_step=intent.owner_step, claim_token=intent.claim_token, existing_state=existing.state,
    )
    effect_changed.send(
        sender=Effect, effect=existing, event="EFFECT_BLOCKED", actor=intent.claim_token,
        note=f"{kind}: the {existing.state} effect already holds this {'key' if kind == 'duplicate' else 'slot'}",
        from_state=existing.state,
    )


# --- 2. the call -----------------------------------------------------------------------------


def effect_perform(intent: Intent, effect: Effect, *, deadline: float,
                   channel: Channel | None = None) -> CallResult | None:
    """With no transaction open, once the intent has committed: the channel's
    call. None when `deadline` (monotonic seconds: when the caller's claim may
    end; required) came before any request could leave -- nothing was sent,
    the row is still `intent`, and the caller hands its work back.

    The gate asks the deadline for the channel's longest call before anything
    leaves, and passes it to `perform(…, deadline)`, whose channel asks it
    again right before each request's bytes leave (`CallDeadline.room_to_send`).
    A retry (attempt > 1) on a channel with a look-up looks the key up first and does not write if it is found: on a
    system that ignores keys a late write of an earlier attempt and this one
    cannot both land (unless they fall within the look-up's own round trip).
    Attempts share what they know: when that look-up could not tell and the
    retry then provably sent nothing, an effect with an earlier `unknown`
    attempt stays `unknown`, never `failed` (`_earlier_attempt_in_doubt`)."""
    if _in_transaction():
        raise TransactionMisuse("effect_perform runs with no transaction open: the intent must be committed "
                                "before the call, and no lock may be held during it")
    call, seen = CallDeadline(deadline), None  # no deadline: a TypeError, nothing called
    crash_point("after_intent")
    channel = channel or get_channel(intent.spec.channel)
    try:
        call.room_to_send(channel.max_call_seconds, "the call")  # (and the look-up before a retry)
        if effect.attempts > 1 and channel.supports_lookup:
            seen = channel.lookup(intent.key, intent.payload)
            if seen.found:
                return committed(seen.external_ref or f"found before retrying: {seen.detail}")
        result = channel.perform(intent.spec, intent.payload, intent.key, call)
    except Expired as exc:
        if not call.writes_sent:
            return None
        result = unknown(f"{exc} (after {call.writes_sent} write(s) of this action had left)", answered=False)
    crash_point("after_call")
    if result.state == EffectState.FAILED and seen is not None and seen.found is None \
            and effect.verdict == Verdict.NOT_HAPPENED:
        return _earlier_attempt_in_doubt(effect, result, seen)
    return result


def _earlier_attempt_in_doubt(effect: Effect, result: CallResult, seen: LookupResult) -> CallResult:
    """A retry that provably sent nothing, of an effect an earlier attempt of which was `unknown`
    (judged "did not happen": the row's verdict), after a look-up that could not tell: that earlier
    call may have landed, and the row holds the whole effect, not only this attempt. So the effect is
    `unknown`, not `failed`: reconcile asks again, and a look-up that answers settles it. Nothing of
    this attempt is in flight, so it may ask at once (`answered`)."""
    return unknown(f"attempt {effect.attempts} sent nothing ({result.error}), and the look-up before it "
                   f"could not tell whether an earlier attempt landed ({seen.detail})", answered=True)


# --- 3. the outcome --------------------------------------------------------------------------


def outcome_record(intent: Intent, effect: Effect, result: CallResult) -> bool:
    """Inside the caller's transaction: the call's outcome and its transition,
    if the row is still `intent` under this caller's token. True when it was.

    False when it was not: the caller's claim was taken over while it called,
    and the new holder's recovery already turned the row into `unknown` (the
    truth is left to reconcile; what this caller saw is noted). The caller
    then writes nothing of its own."""
    if not _in_transaction():
        raise TransactionMisuse("outcome_record runs inside the caller's transaction.atomic()")
    settle = None
    if result.state == EffectState.UNKNOWN and not result.answered:
        # it may land still: a look-up's "not found" is trusted only after its in-flight bound
        settle = get_channel(intent.spec.channel).in_flight_seconds + SETTLE_MARGIN_SECONDS
    if record_outcome(effect, intent, result, settle_seconds=settle):
        transaction.on_commit(lambda: crash_point("after_commit"))
        return True
    effect.refresh_from_db()
    effect_changed.send(sender=Effect, effect=effect, event="EFFECT_FENCED", actor=intent.claim_token,
                        note=f"the caller's token saw {result.state}: {result.error or result.external_ref}",
                        from_state=effect.state)
    return False
