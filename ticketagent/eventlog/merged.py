"""A task's whole log: its events merged in time order with the ledger's transitions of its effects.

An effect's change is recorded once, in the ledger's transition log
(`EffectTransition`, carrying the row after the change); the task's events
refer to its effects (the ledger's owner is the task and the item) instead
of copying them. Export and replay read both and merge them here, into the
lines an export has always had: `{"timestamp", "type", "payload", "item",
"actor"}`, the payload of a transition being the effect's row after it plus
`from_state` and `note`. Transitions written before the ledger kept that row
(an empty snapshot) were copied into the events then, and are left out.
"""

import datetime as dt
import heapq
import json
from collections.abc import Iterable, Iterator

from django.utils.dateparse import parse_datetime

from ledger.history import owner_transitions

_decode = json.JSONDecoder().raw_decode


def when(value) -> dt.datetime:
    """A timestamp read with plain SQL: SQLite gives text (UTC), PostgreSQL an aware datetime."""
    if isinstance(value, str):
        value = parse_datetime(value)
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def transition_payload(snapshot: dict, from_state: str, note: str) -> dict:
    payload = {**snapshot, "from_state": from_state}
    if note:
        payload["note"] = note[:500]
    return payload


def task_transitions(task_id: int, chunk: int = 5000) -> Iterator[tuple]:
    """(at, id, line) for each transition of the task's effects that carries its row, in id order."""
    for tid, at, event, snapshot, from_state, note, actor, owner_item in owner_transitions(str(task_id), chunk):
        snapshot = _decode(snapshot)[0]  # (an old row, with none, was copied into the events: not read)
        at = when(at)
        yield at, tid, {"type": event, "payload": transition_payload(snapshot, from_state, note),
                        "item": int(owner_item), "actor": actor, "timestamp": at}


def merge(events: Iterable[tuple], transitions: Iterable[tuple]) -> Iterator[dict]:
    """Both inputs as (timestamp, id, line) in id order; one stream by time. A
    transition and an event written at the same instant keep that order:
    events first (the fence and the step before the ledger's change)."""
    tagged_events = ((at, 0, n, line) for at, n, line in events)
    tagged_transitions = ((at, 1, n, line) for at, n, line in transitions)
    for *_, line in heapq.merge(tagged_events, tagged_transitions, key=lambda t: t[:3]):
        yield line
