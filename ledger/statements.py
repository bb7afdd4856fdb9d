"""The gate's writes as statements: a ledger row's change with its transition, one round trip on PostgreSQL.

Every change of an effect is recorded by its transition, in the statement
(or, elsewhere, the transaction) that makes it. On PostgreSQL both go in one
data-modifying `WITH`; a caller's fence (`Fence`) may be folded in, so that a
phase is one statement in autocommit, and a caller's own writes (`Rider`) may
ride with an outcome: they commit with it or not at all.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection
from django.utils import timezone

from ledger.keys import Intent, summarize
from ledger.models import Effect, EffectState, EffectTransition
from ledger.signals import effect_changed

# Past every bound an unknown's settle time counts (a call's timeouts, a
# gateway's upstream timeout, the old holder's lease): scheduling and clock
# rates between the processes that compare them.
SETTLE_MARGIN_SECONDS = 2.0


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


@dataclass(frozen=True)
class Rider:
    """A caller's writes that commit with an effect's outcome, in the
    outcome's one statement (PostgreSQL, with a folded `Fence`). `ctes` are
    more items of its `WITH` (`name AS (…)`, comma-joined), each written
    only when `EXISTS (SELECT 1 FROM ok)`: the gate's CTE `ok` has one row
    exactly when the outcome was written and the fence held. `answers` are
    SQL expressions (comma-joined) the statement returns after the outcome's
    id and the fence's answer."""

    ctes: str
    params: list
    answers: str


def announce(effect: Effect, event: str, *, actor: str, note: str, from_state: str) -> None:
    """Tell the owner of a change whose transition is already written (`recorded=True`: not to be copied)."""
    effect_changed.send(sender=Effect, effect=effect, event=event, actor=actor, note=note, from_state=from_state,
                        recorded=True)


def record_transition(effect: Effect, from_state: str, event: str, *, actor: str = "", note: str = "") -> None:
    """Append the transition and tell the owner, inside the caller's transaction.

    The transition (with the row after it) is the change's one audit record:
    `recorded=True` tells a listener not to copy it into a log of its own."""
    EffectTransition.objects.create(
        effect=effect, event=event, from_state=from_state, to_state=effect.state, actor=actor, note=note[:2000],
        snapshot=effect.snapshot(),
    )
    announce(effect, event, actor=actor, note=note, from_state=from_state)


def transition_insert(source: str, effect: Effect, from_state: str, event: str, *, actor: str, note: str
                      ) -> tuple[str, list]:
    """An INSERT of the transition of `effect` (the row as it will be) for each row of the CTE `source`
    (its `id` the effect's), as SQL for a `WITH`, and its parameters."""
    quote = connection.ops.quote_name
    snapshot = {k: v for k, v in effect.snapshot().items() if k != "effect_id"}  # the id comes from the row
    columns = ", ".join(quote(c) for c in ("effect_id", "event", "from_state", "to_state", "actor", "note",
                                           "snapshot", "at"))
    sql = (f"INSERT INTO {quote(EffectTransition._meta.db_table)} ({columns}) SELECT {source}.id, %s, %s, %s, %s, "
           f"%s, CAST(%s AS jsonb) || jsonb_build_object('effect_id', {source}.id), %s FROM {source}")
    return sql, [event, from_state, effect.state, actor, note[:2000], json.dumps(snapshot), timezone.now()]


def write_with_transition(sql: str, params: list, effect: Effect, from_state: str, event: str, *, actor: str,
                          note: str, held: Fence | None = None, rider: Rider | None = None) -> tuple | None:
    """Run `sql` -- an INSERT or an UPDATE of the row of `effect` (`effect`
    holding the row as it will be), ending in `RETURNING id` -- and, if it
    wrote the row, append its transition in the same statement (a
    data-modifying WITH: one round trip, not two). Returns the row written
    (its id first), or None.

    `held`: a fence evaluated first, as the CTE `f` (`sql` may
    refer to `(SELECT held FROM f)`: that makes the fence's lock come before
    the row's), its answer returned second. With a `rider` (and `held`) the
    statement always returns one row: the id written (or None), the fence's
    answer, then the rider's answers."""
    first, first_params, answer = "", [], ""
    if held is not None:
        first, first_params, answer = f"f AS MATERIALIZED (SELECT ({held.condition}) AS held), ", list(held.params), \
            ", (SELECT held FROM f)"
    transition, transition_params = transition_insert("w", effect, from_state, event, actor=actor, note=note)
    if rider is None:
        statement = f"WITH {first}w AS ({sql}) {transition} RETURNING effect_id{answer}"
        rider_params = []
    else:
        statement = (f"WITH {first}w AS ({sql}), t AS ({transition} RETURNING effect_id), "
                     f"ok AS (SELECT 1 FROM t WHERE (SELECT held FROM f)), {rider.ctes} "
                     f"SELECT (SELECT effect_id FROM t), (SELECT held FROM f), {rider.answers}")
        rider_params = rider.params
    with connection.cursor() as cursor:
        cursor.execute(statement, [*first_params, *params, *transition_params, *rider_params])
        row = cursor.fetchone()
    if row is None or row[0] is None:
        return row
    effect.pk = row[0]
    announce(effect, event, actor=actor, note=note, from_state=from_state)
    return row


def intent_row(intent: Intent, now) -> tuple[Effect, list, list]:
    """The `intent` row of `intent` as it will be written: the instance, its columns' fields and values."""
    spec = intent.spec
    effect = Effect(
        idempotency_key=intent.key, slot=intent.slot, action=spec.name, effect_class=spec.effect_class,
        channel=spec.channel, state=EffectState.INTENT, attempts=1, owner_task=intent.owner_task,
        owner_item=intent.owner_item, owner_step=intent.owner_step, lease_token=intent.lease_token,
        payload=intent.payload, payload_hash=intent.p_hash, payload_summary=summarize(intent.payload),
        authorized_by=intent.authorized_by, intent_at=now,
    )
    fields = [f for f in Effect._meta.concrete_fields if not f.primary_key]
    return effect, fields, [f.get_db_prep_save(f.pre_save(effect, True), connection) for f in fields]


def _intent_insert(fields: list, when: str) -> str:
    """INSERT of one `intent` row (the values as parameters), if `when` (SQL), unless a unique index refuses it."""
    quote = connection.ops.quote_name
    values = ", ".join(["%s"] * len(fields))
    source = f"SELECT {values} WHERE {when}" if when else f"VALUES ({values})"
    return (f"INSERT INTO {quote(Effect._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) {source} "
            f"ON CONFLICT DO NOTHING RETURNING {quote('id')}")


def insert_intent(intent: Intent, now, fence: Fence | None = None) -> Effect | None:
    """The new row, or None when a unique index refused it (its key or its
    slot is taken) -- or, with a folded `fence`, when the fence did."""
    effect, fields, values = intent_row(intent, now)
    when = ""
    if fence is not None:  # the fence's lock comes first: the SELECT runs before the insert
        when, values = fence.condition, [*values, *fence.params]
    if write_with_transition(_intent_insert(fields, when), values, effect, "", "EFFECT_INTENT",
                             actor=intent.lease_token, note=effect.payload_summary) is None:
        return None
    effect._state.adding, effect._state.db = False, connection.alias
    return effect


def intent_written(effect: Effect, intent: Intent, pk: int) -> Effect:
    """The row of `intent_ctes` once the caller's statement wrote it (its id `pk`): saved, its owner told."""
    effect.pk = pk
    effect._state.adding, effect._state.db = False, connection.alias
    announce(effect, "EFFECT_INTENT", actor=intent.lease_token, note=effect.payload_summary, from_state="")
    return effect


def intent_ctes(intent: Intent, now, *, name: str, when: str, when_params=()) -> tuple[str, list, Effect]:
    """For a caller's statement (PostgreSQL): the `intent` row of `intent`
    and its transition as two CTEs, `name` (returning the new id; no row when
    `when`, with `when_params`, is false or a unique index refused it) and `name`_t. Returns the
    SQL, its parameters and the row's instance (`intent_written` once the
    statement answered its id)."""
    effect, fields, values = intent_row(intent, now)
    transition, transition_params = transition_insert(name, effect, "", "EFFECT_INTENT", actor=intent.lease_token,
                                                      note=effect.payload_summary)
    sql = f"{name} AS ({_intent_insert(fields, when)}), {name}_t AS ({transition})"
    return sql, [*values, *when_params, *transition_params], effect


def record_outcome(effect: Effect, intent: Intent, result, held: Fence | None = None, rider: Rider | None = None,
                   *, settle_seconds: float | None = None) -> tuple | None:
    """The outcome and its transition, if the row is still `intent` under this
    caller's lease token (`write_with_transition`'s answer). The row is then
    what phase 1 left plus this outcome, so it is not read back (one round
    trip less per effect). `settle_seconds`: for an unknown that may land
    still, its settle time is the database's now plus that many seconds."""
    now = timezone.now()
    outcome = dict(state=result.state, external_ref=result.external_ref[:200], last_error=result.error[:4000],
                   answered=result.answered, outcome_at=now, updated_at=now)
    quote = connection.ops.quote_name
    fields = [Effect._meta.get_field(name) for name in outcome]
    # with a folded fence, its answer is asked for first (the caller's row locked before this one: a take-over's
    # lock order); the outcome is written whatever it is -- it is the truth
    first = " AND (SELECT held FROM f) IS NOT NULL" if held is not None else ""
    settle = (f", {quote('settle_after')} = clock_timestamp() + %s * interval '1 second'"
              if settle_seconds is not None else "")
    sql = (f"UPDATE {quote(Effect._meta.db_table)} SET {', '.join(f'{quote(f.column)} = %s' for f in fields)}"
           f"{settle} WHERE {quote('id')} = %s AND {quote('state')} = %s AND {quote('lease_token')} = %s{first} "
           f"RETURNING id")
    params = [f.get_db_prep_save(outcome[f.name], connection) for f in fields]
    if settle_seconds is not None:
        params.append(settle_seconds)
    before = {name: getattr(effect, name) for name in outcome}
    for name, value in outcome.items():
        setattr(effect, name, value)
    row = write_with_transition(sql, [*params, effect.pk, EffectState.INTENT, intent.lease_token], effect,
                                EffectState.INTENT, f"EFFECT_{result.state.upper()}", actor=intent.lease_token,
                                note=result.error or result.external_ref, held=held, rider=rider)
    if row is None or row[0] is None:
        for name, value in before.items():
            setattr(effect, name, value)
    return row
