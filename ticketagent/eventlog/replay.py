"""Rebuild a task's checkpoints and ledger state from its event log alone,
and compare with the tables. Any difference means a state change was made
without its event (or the other way round)."""

import json
from collections.abc import Iterable

from django.db import connection

from ledger.models import BlockedDuplicate, Effect
from ticketagent.eventlog.merged import merge, task_transitions, when
from ticketagent.models import Blob, Checkpoint, Event

EFFECT_FIELDS = ("key", "slot", "action", "effect_class", "channel", "state", "attempts", "step", "payload_hash",
                 "external_ref", "resolved_by", "verdict", "reviewed_by")
# both carry a step's output into the checkpoint: STEP_SKIPPED is a step the decision did not choose
STEP_EVENTS = ("STEP_DONE", "STEP_SKIPPED")
# events whose output (the step's, or a carried plan's step outputs) may be a blob
OUTPUT_EVENTS = (*STEP_EVENTS, "PLAN_CARRIED")
CHECKPOINT_FIELDS = ("plan_version", "playbook_version_id", "schema_version", "cursor", "input_hash", "step_outputs",
                     "retry_count")


def replay(events: Iterable[dict], blob=lambda ref: Blob.objects.get(pk=ref).content) -> dict:
    """`events`: dicts with type, payload and item (as exported in JSONL)."""
    checkpoints: dict[int, dict] = {}
    effects: dict[str, dict] = {}
    keys: dict[int, str] = {}  # an effect's current key, by its id: a failed slot's row retried with a new payload
    blocked = 0
    for event in events:
        kind, payload, item = event["type"], event["payload"], event.get("item")
        if kind in ("ITEM_STARTED", "PLAN_CARRIED") and item not in checkpoints and "plan_version" in payload:
            # the checkpoint is created at the item's first lease, or carried over from a rehearsal's item
            checkpoints[item] = {"plan_version": payload["plan_version"],
                                 "playbook_version_id": payload.get("playbook_version"),
                                 "schema_version": payload["schema_version"], "cursor": payload["cursor"],
                                 "input_hash": payload["input_hash"],
                                 "step_outputs": _output(event, payload) if kind == "PLAN_CARRIED" else {},
                                 "retry_count": 0}
        elif kind == "ITEM_MOVED":  # to another playbook version: its checkpoint starts again
            checkpoints.pop(item, None)
        elif kind in STEP_EVENTS:
            cp = checkpoints[item]
            cp["step_outputs"] = {**cp["step_outputs"], payload["step"]: _output(event, payload, blob)}
            cp["cursor"] = payload["cursor"]
        elif kind == "RESUMED":
            for item_id in payload.get("items", []):
                if item_id in checkpoints:
                    checkpoints[item_id]["retry_count"] += 1
        elif kind.startswith("EFFECT_") or kind == "REVIEWED":
            if kind == "EFFECT_BLOCKED":
                blocked += 1
            effect_id, key = payload.get("effect_id"), payload["key"]
            if effect_id is not None:
                effects.pop(keys.get(effect_id, key), None)  # the row's key before (the same, or a retry's old one)
                keys[effect_id] = key
            effects[key] = {f: payload.get(f) for f in EFFECT_FIELDS}
    return {"checkpoints": checkpoints, "effects": effects, "blocked_duplicates": blocked}


def _output(event: dict, payload: dict, blob=lambda ref: Blob.objects.get(pk=ref).content):
    """An event's output: read with the chunk (`event["output"]`), carried by the event, or a blob."""
    if "output" in event:
        return event["output"]
    if "output" in payload:  # a small output, carried by the event itself
        return payload["output"]
    return blob(payload["output_ref"])


# The database's JSON text has no surrounding whitespace: raw_decode() skips
# loads()'s checks for it, a third of the decoding time over 100k events.
_decode = json.JSONDecoder().raw_decode


def task_events(task_id: int, chunk: int = 5000) -> Iterable[dict]:
    """The task's log in order (its events merged with its effects' transitions,
    see `merged`), each STEP_DONE or STEP_SKIPPED carrying its output."""
    return merge(_stored_events(task_id, chunk), task_transitions(task_id, chunk))


def _stored_events(task_id: int, chunk: int) -> Iterable[tuple]:
    """(timestamp, id, event) in id order, the outputs of the chunk's steps read
    in one blob query per chunk, not one per event. Read with plain SQL and
    decoded here: the ORM's per-row conversion cost as much as the reading."""
    table, quote = Event._meta.db_table, connection.ops.quote_name
    sql = (f"SELECT id, type, CAST(payload AS TEXT), item_id, {quote('timestamp')} FROM {quote(table)} "
           f"WHERE task_id = %s AND id > %s ORDER BY id LIMIT %s")
    last_id = 0
    while True:
        with connection.cursor() as cursor:
            cursor.execute(sql, [task_id, last_id, chunk])
            rows = cursor.fetchall()
        if not rows:
            return
        last_id = rows[-1][0]
        batch = [(n, kind, _decode(payload)[0], item, at) for n, kind, payload, item, at in rows]
        refs = {p["output_ref"] for _, t, p, _, _ in batch if t in OUTPUT_EVENTS and "output_ref" in p}
        blobs = dict(Blob.objects.filter(sha256__in=refs).values_list("sha256", "content")) if refs else {}
        for n, kind, payload, item, at in batch:
            event = {"type": kind, "payload": payload, "item": item}
            if kind in OUTPUT_EVENTS and "output_ref" in payload:
                event["output"] = blobs[payload["output_ref"]]
            yield when(at), n, event


def tables_state(task_id: int) -> dict:
    checkpoints = {
        cp.item_id: {f: getattr(cp, f) for f in CHECKPOINT_FIELDS}
        for cp in Checkpoint.objects.filter(task_id=task_id)
    }
    effects = {}
    for e in Effect.objects.filter(owner_task=str(task_id)):
        row = {f: getattr(e, f, None) for f in EFFECT_FIELDS}
        row["key"], row["step"] = e.idempotency_key, e.owner_step
        effects[e.idempotency_key] = row
    blocked = BlockedDuplicate.objects.filter(effect__owner_task=str(task_id)).count()
    return {"checkpoints": checkpoints, "effects": effects, "blocked_duplicates": blocked}


def diff(replayed: dict, tables: dict) -> list[str]:
    out = []
    for section in ("checkpoints", "effects"):
        a, b = replayed[section], tables[section]
        for key in sorted(set(a) | set(b), key=str):
            if key not in a:
                out.append(f"{section} {key}: in the tables, not in the events")
            elif key not in b:
                out.append(f"{section} {key}: in the events, not in the tables")
            else:
                for field in a[key]:
                    if a[key][field] != b[key].get(field):
                        out.append(f"{section} {key} {field}: events say {a[key][field]!r}, "
                                   f"tables say {b[key].get(field)!r}")
    if replayed["blocked_duplicates"] != tables["blocked_duplicates"]:
        out.append(f"blocked duplicates: events say {replayed['blocked_duplicates']}, "
                   f"tables say {tables['blocked_duplicates']}")
    return out

