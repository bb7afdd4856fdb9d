"""The gate's writes as statements: a ledger row's change with its transition, one round trip.

Every change of an effect is recorded by its transition, in the statement
(or the transaction) that makes it. The gate's two writes -- a new `intent`,
an outcome -- put both in one data-modifying `WITH` (hand-written here, and
only here: the ORM cannot say "insert unless a unique index refuses, and
append the transition if it wrote").
"""

import json

from django.db import connection
from django.utils import timezone

from ledger.keys import Intent
from ledger.models import Effect, EffectState, EffectTransition
from ledger.signals import effect_changed


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
                          note: str) -> bool:
    """Run `sql` -- an INSERT or an UPDATE of the row of `effect` (`effect`
    holding the row as it will be), ending in `RETURNING id` -- and, if it
    wrote the row, append its transition in the same statement (a
    data-modifying WITH: one round trip, not two). True when it wrote."""
    transition, transition_params = transition_insert("w", effect, from_state, event, actor=actor, note=note)
    with connection.cursor() as cursor:
        cursor.execute(f"WITH w AS ({sql}) {transition} RETURNING effect_id", [*params, *transition_params])
        row = cursor.fetchone()
    if row is None:
        return False
    effect.pk = row[0]
    announce(effect, event, actor=actor, note=note, from_state=from_state)
    return True


def intent_row(intent: Intent, now) -> tuple[Effect, list, list]:
    """The `intent` row of `intent` as it will be written: the instance, its columns' fields and values."""
    spec = intent.spec
    effect = Effect(
        idempotency_key=intent.key, slot=intent.slot, action=spec.name, effect_class=spec.effect_class,
        channel=spec.channel, state=EffectState.INTENT, attempts=1, owner_task=intent.owner_task,
        owner_item=intent.owner_item, owner_step=intent.owner_step, claim_token=intent.claim_token,
        payload=intent.payload, payload_hash=intent.p_hash, payload_summary=intent.summary,
        authorized_by=intent.authorized_by, intent_at=now,
    )
    fields = [f for f in Effect._meta.concrete_fields if not f.primary_key]
    return effect, fields, [f.get_db_prep_save(f.pre_save(effect, True), connection) for f in fields]


def insert_intent(intent: Intent, now) -> Effect | None:
    """The new `intent` row and its transition, or None when a unique index refused it (its key or its slot is
    taken)."""
    effect, fields, values = intent_row(intent, now)
    quote = connection.ops.quote_name
    sql = (f"INSERT INTO {quote(Effect._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
           f"VALUES ({', '.join(['%s'] * len(fields))}) ON CONFLICT DO NOTHING RETURNING {quote('id')}")
    if not write_with_transition(sql, values, effect, "", "EFFECT_INTENT", actor=intent.claim_token,
                                 note=effect.payload_summary):
        return None
    fields = Effect._meta.concrete_fields  # the instance as loaded from its row (Django's own `from_db`)
    return Effect.from_db(connection.alias, [f.attname for f in fields], [getattr(effect, f.attname) for f in fields])


def record_outcome(effect: Effect, intent: Intent, result, *, settle_seconds: float | None = None) -> bool:
    """The outcome and its transition, if the row is still `intent` under this
    caller's claim token. True when it was written. The row is then what the
    intent left plus this outcome, so it is not read back. `settle_seconds`:
    for an unknown that may land still, its settle time is the database's now
    plus that many seconds."""
    now = timezone.now()
    outcome = dict(state=result.state, external_ref=result.external_ref[:200], last_error=result.error[:4000],
                   answered=result.answered, outcome_at=now, updated_at=now)
    quote = connection.ops.quote_name
    fields = [Effect._meta.get_field(name) for name in outcome]
    settle = (f", {quote('settle_after')} = clock_timestamp() + %s * interval '1 second'"
              if settle_seconds is not None else "")
    sql = (f"UPDATE {quote(Effect._meta.db_table)} SET {', '.join(f'{quote(f.column)} = %s' for f in fields)}"
           f"{settle} WHERE {quote('id')} = %s AND {quote('state')} = %s AND {quote('claim_token')} = %s "
           f"RETURNING id")
    params = [f.get_db_prep_save(outcome[f.name], connection) for f in fields]
    if settle_seconds is not None:
        params.append(settle_seconds)
    before = {name: getattr(effect, name) for name in outcome}
    for name, value in outcome.items():
        setattr(effect, name, value)
    written = write_with_transition(sql, [*params, effect.pk, EffectState.INTENT, intent.claim_token], effect,
                                    EffectState.INTENT, f"EFFECT_{result.state.upper()}", actor=intent.claim_token,
                                    note=result.error or result.external_ref)
    if not written:
        for name, value in before.items():
            setattr(effect, name, value)
    return written


def transitions_page(owner_task: str, after_id: int, limit: int) -> list[tuple]:
    """Up to `limit` transitions after `after_id` (in id order) of the effects of `owner_task` that carry the
    effect's row: (id, at, event, snapshot as JSON text, from_state, note, actor, owner_item). Plain SQL: the
    snapshot stays text for the reader to decode, the ORM's per-row conversion cost as much as the reading."""
    quote = connection.ops.quote_name
    sql = (f"SELECT t.id, t.at, t.event, CAST(t.snapshot AS TEXT), t.from_state, t.note, t.actor, e.owner_item "
           f"FROM {quote(EffectTransition._meta.db_table)} t JOIN {quote(Effect._meta.db_table)} e "
           f"ON e.id = t.effect_id WHERE e.owner_task = %s AND t.id > %s AND CAST(t.snapshot AS TEXT) <> '{{}}' "
           f"ORDER BY t.id LIMIT %s")
    with connection.cursor() as cursor:
        cursor.execute(sql, [owner_task, after_id, limit])
        return cursor.fetchall()
