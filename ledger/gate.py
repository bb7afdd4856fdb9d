"""The dedupe gate: the one way an effect reaches the outside world.

    phase 1 (transaction): fence check; insert the `intent` row with its
            idempotency key and slot -- or find the row that holds them
            and stop there (a blocked duplicate, recorded as a row);
    call    (no transaction): the channel, with the key passed downstream;
    phase 2 (transaction): record the outcome, only if this caller still
            holds the attempt (fencing: an orphaned worker cannot commit);
            while the caller's fence holds, its own recovery point (`then`)
            commits in the same transaction.

A crash between the phases leaves an `intent` row; recovery turns it into
`unknown` and reconcile or review resolves it. Nothing is ever retried on a
guess.
"""

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from ledger.actions import ActionSpec, action_spec
from ledger.channels.base import CallResult, Channel
from ledger.channels.registry import get_channel
from ledger.faults import crash_point
from ledger.models import SLOTTED_CLASSES, BlockedDuplicate, Effect, EffectState, EffectTransition
from ledger.signals import effect_changed


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
    blocked: str = ""  # "", "duplicate", "conflict" or "fenced" (the caller lost its claim meanwhile)


@dataclass(frozen=True)
class Fence:
    """A caller's fence as one SQL condition as well as a check. On
    PostgreSQL the gate folds `condition` into its own statement for each
    phase -- the phase is then one statement in autocommit, no transaction
    block -- and runs `check()` (which raises `Fenced`) wherever it cannot.
    `condition` must lock what it reads (`FOR NO KEY UPDATE`), as the check
    does, so that the claim cannot change until the statement commits."""

    condition: str
    params: tuple
    check: Callable[[], None]

    def __call__(self) -> None:
        self.check()


def _folds(fence) -> bool:
    return isinstance(fence, Fence) and connection.vendor == "postgresql"


def canonical_json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def payload_hash(payload: dict) -> str:
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def idempotency_key(*, owner_task: str, owner_item: str, owner_step: str, action: str, p_hash: str) -> str:
    """Same intent, same key; changed content, new key."""
    raw = "\x1f".join((owner_task, owner_item, owner_step, action, p_hash))
    return hashlib.sha256(raw.encode()).hexdigest()


def slot_for(*, owner_task: str, owner_item: str, owner_step: str, action: str) -> str:
    return f"{owner_task}/{owner_item}/{owner_step}/{action}"


def summarize(payload: dict) -> str:
    body = payload.get("body", payload)
    if isinstance(body, dict):
        parts = [f"{k}={str(v)[:60]}" for k, v in body.items() if k != "body"]
        if "body" in body:
            parts.append(f"body={str(body['body'])[:80]!r}")
        text = f"ticket {payload.get('ticket', '?')}: " + ", ".join(parts)
    else:
        text = str(body)
    return text[:300]


def record_transition(effect: Effect, from_state: str, event: str, *, actor: str = "", note: str = "") -> None:
    """Append the transition and tell the owner, inside the caller's transaction.

    The transition (with the row after it) is the change's one audit record:
    `recorded=True` tells a listener not to copy it into a log of its own."""
    EffectTransition.objects.create(
        effect=effect, event=event, from_state=from_state, to_state=effect.state, actor=actor, note=note[:2000],
        snapshot=effect.snapshot(),
    )
    effect_changed.send(sender=Effect, effect=effect, event=event, actor=actor, note=note, from_state=from_state,
                        recorded=True)


def write_with_transition(sql: str, params: list, effect: Effect, from_state: str, event: str, *, actor: str,
                          note: str, held: Fence | None = None) -> tuple | None:
    """Run `sql` -- an INSERT or an UPDATE of the row of `effect` (`effect`
    holding the row as it will be), ending in `RETURNING id` -- and, if it
    wrote the row, append its transition: on PostgreSQL in the same statement
    (a data-modifying WITH: one round trip, not two), elsewhere with
    `record_transition`. Returns the row written (its id first), or None.

    `held` (PostgreSQL): a fence evaluated first, as the CTE `f` (`sql` may
    refer to `(SELECT held FROM f)`: that makes the fence's lock come before
    the row's), its answer returned second."""
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if row is None:
            return None
        effect.pk = row[0]
        record_transition(effect, from_state, event, actor=actor, note=note)
        return row
    quote = connection.ops.quote_name
    snapshot = {k: v for k, v in effect.snapshot().items() if k != "effect_id"}  # the id comes from the row
    columns = ", ".join(quote(c) for c in ("effect_id", "event", "from_state", "to_state", "actor", "note",
                                           "snapshot", "at"))
    first, first_params, answer = "", [], ""
    if held is not None:
        first, first_params, answer = f"f AS MATERIALIZED (SELECT ({held.condition}) AS held), ", list(held.params), \
            ", (SELECT held FROM f)"
    statement = (f"WITH {first}w AS ({sql}) INSERT INTO {quote(EffectTransition._meta.db_table)} ({columns}) "
                 "SELECT w.id, %s, %s, %s, %s, %s, CAST(%s AS jsonb) || jsonb_build_object('effect_id', w.id), %s "
                 f"FROM w RETURNING effect_id{answer}")
    with connection.cursor() as cursor:
        cursor.execute(statement, [*first_params, *params, event, from_state, effect.state, actor, note[:2000],
                                   json.dumps(snapshot), timezone.now()])
        row = cursor.fetchone()
    if row is None:
        return None
    effect.pk = row[0]
    effect_changed.send(sender=Effect, effect=effect, event=event, actor=actor, note=note, from_state=from_state,
                        recorded=True)
    return row


@dataclass(frozen=True)
class Intent:
    """Everything phase 1 records: what is asked for, by whom, under which key and slot."""

    spec: ActionSpec
    payload: dict
    owner_task: str
    owner_item: str
    owner_step: str
    lease_token: str
    authorized_by: str
    p_hash: str
    key: str
    slot: str | None

    @classmethod
    def build(cls, *, spec: ActionSpec, payload: dict, owner_task: str, owner_item: str, owner_step: str,
              lease_token: str, authorized_by: str) -> "Intent":
        p_hash = payload_hash(payload)
        key = idempotency_key(owner_task=owner_task, owner_item=owner_item, owner_step=owner_step,
                              action=spec.name, p_hash=p_hash)
        slot = slot_for(owner_task=owner_task, owner_item=owner_item, owner_step=owner_step,
                        action=spec.name) if spec.slotted else None
        return cls(spec=spec, payload=payload, owner_task=owner_task, owner_item=owner_item, owner_step=owner_step,
                   lease_token=lease_token, authorized_by=authorized_by, p_hash=p_hash, key=key, slot=slot)


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
        effect = _insert_intent(intent, timezone.now(), fence)
        if effect is not None:
            return effect, ""
    with transaction.atomic():
        return intent_record(intent, fence)


def effect_call(intent: Intent, effect: Effect, blocked: str = "", *, fence: Callable[[], None] | None = None,
                channel: Channel | None = None, then: Callable[[Effect], None] | None = None,
                outcome_fence: Callable[[CallResult], None] | None = None) -> GateResult:
    """After phase 1 has committed (`intent_record`, in the gate's transaction or
    the caller's): the call and phase 2. A blocked intent is answered as it is.

    `outcome_fence(result)`, when given, is phase 2's fence instead of
    `fence`, told the call's result: a caller may fold its own writes for
    that result into its fence check (move its recovery point on the
    condition that it still holds its claim: one statement instead of two).
    Those writes commit with the outcome or not at all: if the outcome then
    cannot be recorded (the row is no longer this caller's attempt, though
    its fence held), phase 2 is rolled back and `OutcomeRefused` raised."""
    if blocked:
        return GateResult(effect=effect, state=effect.state, blocked=blocked)
    crash_point("after_intent")

    # --- the call: no transaction is open here ---------------------------------
    result = (channel or get_channel(intent.spec.channel)).perform(intent.spec, intent.payload, intent.key)
    crash_point("after_call")

    # --- phase 2: the outcome, fenced by the lease token -------------------------
    ours = _phase_outcome(effect, intent, result, fence, then, outcome_fence)
    crash_point("after_commit")
    return GateResult(effect=effect, state=effect.state, called=True, blocked="" if ours else "fenced")


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
    effect = _insert_intent(intent, timezone.now())
    if effect is None:
        return _phase_intent_general(intent)
    return effect, ""


def _phase_outcome(effect: Effect, intent: Intent, result, fence, then, outcome_fence=None) -> bool:
    """Record the call's outcome if the row is still this caller's attempt.
    True when it was and the caller's fence held (so `then` ran)."""
    if then is None and outcome_fence is None and _folds(fence):
        row = _record_outcome(effect, intent, result, fence)
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
        updated = _record_outcome(effect, intent, result)
        if not updated and held and outcome_fence is not None:
            raise OutcomeRefused(f"effect {effect.pk}: the caller's fence held but the row is no longer its "
                                 "attempt; nothing of phase 2 is kept")
        if not updated:
            _outcome_not_ours(effect, intent, result)
            return False
        if held and then is not None:
            then(effect)
        return held


def _outcome_not_ours(effect: Effect, intent: Intent, result) -> None:
    """Our lease was taken over while we were calling: the new owner's
    recovery already turned the row into `unknown`. Leave the truth to
    reconcile; note what we saw."""
    effect.refresh_from_db()
    effect_changed.send(sender=Effect, effect=effect, event="EFFECT_FENCED", actor=intent.lease_token,
                        note=f"fenced lease token saw {result.state}: {result.error or result.external_ref}",
                        from_state=effect.state)


def _record_outcome(effect: Effect, intent: Intent, result, held: Fence | None = None) -> tuple | None:
    """The outcome and its transition, if the row is still `intent` under this
    caller's lease token. The row is then what phase 1 left plus this outcome,
    so it is not read back (one round trip less per effect)."""
    now = timezone.now()
    outcome = dict(state=result.state, external_ref=result.external_ref[:200], last_error=result.error[:4000],
                   answered=result.answered, outcome_at=now, updated_at=now)
    quote = connection.ops.quote_name
    fields = [Effect._meta.get_field(name) for name in outcome]
    # with a folded fence, its answer is asked for first (the caller's row locked before this one: a take-over's
    # lock order); the outcome is written whatever it is -- it is the truth
    first = " AND (SELECT held FROM f) IS NOT NULL" if held is not None else ""
    sql = (f"UPDATE {quote(Effect._meta.db_table)} SET {', '.join(f'{quote(f.column)} = %s' for f in fields)} "
           f"WHERE {quote('id')} = %s AND {quote('state')} = %s AND {quote('lease_token')} = %s{first} RETURNING id")
    params = [f.get_db_prep_save(outcome[f.name], connection) for f in fields]
    before = {name: getattr(effect, name) for name in outcome}
    for name, value in outcome.items():
        setattr(effect, name, value)
    row = write_with_transition(sql, [*params, effect.pk, EffectState.INTENT, intent.lease_token], effect,
                                EffectState.INTENT, f"EFFECT_{result.state.upper()}", actor=intent.lease_token,
                                note=result.error or result.external_ref, held=held)
    if row is None:
        for name, value in before.items():
            setattr(effect, name, value)
    return row


def _by_slot(slot: str) -> Q:
    """Rows holding a slot. Only `once`/`irreversible` rows have one, so the
    class condition changes nothing in the answer -- but it is the condition
    of the partial unique index on slot, which PostgreSQL can only use when
    the query states it: without it every look-up by slot read the whole
    ledger (~100 ms at 300k effects; docs/benchmarks.md)."""
    return Q(slot=slot, effect_class__in=SLOTTED_CLASSES)


def _insert_intent(intent: Intent, now, fence: Fence | None = None) -> Effect | None:
    """The new row, or None when a unique index refused it (its key or its
    slot is taken) -- or, with a folded `fence`, when the fence did."""
    spec = intent.spec
    effect = Effect(
        idempotency_key=intent.key, slot=intent.slot, action=spec.name, effect_class=spec.effect_class,
        channel=spec.channel, state=EffectState.INTENT, attempts=1, owner_task=intent.owner_task,
        owner_item=intent.owner_item, owner_step=intent.owner_step, lease_token=intent.lease_token,
        payload=intent.payload, payload_hash=intent.p_hash, payload_summary=summarize(intent.payload),
        authorized_by=intent.authorized_by, intent_at=now,
    )
    fields = [f for f in Effect._meta.concrete_fields if not f.primary_key]
    values = [f.get_db_prep_save(f.pre_save(effect, True), connection) for f in fields]
    quote = connection.ops.quote_name
    row_values = f"VALUES ({', '.join(['%s'] * len(fields))})"
    if fence is not None:  # the fence's lock comes first: the SELECT runs before the insert
        row_values = f"SELECT {', '.join(['%s'] * len(fields))} WHERE {fence.condition}"
        values = [*values, *fence.params]
    sql = (f"INSERT INTO {quote(Effect._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
           f"{row_values} ON CONFLICT DO NOTHING RETURNING {quote('id')}")
    if write_with_transition(sql, values, effect, "", "EFFECT_INTENT", actor=intent.lease_token,
                             note=effect.payload_summary) is None:
        return None
    effect._state.adding, effect._state.db = False, connection.alias
    return effect


def _retry(existing: Effect, intent: Intent, now) -> Effect:
    """The same row and key, attempt + 1, back to `intent`."""
    from_state = existing.state
    existing.state = EffectState.INTENT
    existing.attempts += 1
    existing.lease_token = intent.lease_token
    existing.intent_at = now
    existing.outcome_at = existing.answered = None
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
