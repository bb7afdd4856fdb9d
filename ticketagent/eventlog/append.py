"""Appending to the event log. Call inside the transaction of the change.

Every item writes several events a step, so they go out as one hand-written
multi-row INSERT: through the ORM (`bulk_create`, `create`) preparing them
cost a worker more CPU than the statement costs the server. The log is
append-only: nothing here reads an event back (no ids are returned).
"""

import hashlib
import json

from django.db import connection
from django.utils import timezone

from ticketagent.models import Blob, Event

_COLUMNS = ("task_id", "item_id", "type", "payload", "actor", "timestamp")
_INSERT = (f"INSERT INTO {connection.ops.quote_name(Event._meta.db_table)} "
           f"({', '.join(connection.ops.quote_name(c) for c in _COLUMNS)}) VALUES ")
_ROW = f"({', '.join(['%s'] * len(_COLUMNS))})"
_PAYLOAD = Event._meta.get_field("payload")
BATCH_ROWS = 1000  # rows a statement (PostgreSQL takes up to 65,535 parameters)


def event_append(*, task_id: int, type: str, payload: dict | None = None, item_id: int | None = None,
                 actor: str = "") -> None:
    events_append([Event(task_id=task_id, item_id=item_id, type=type, payload=payload or {}, actor=actor)])


def events_append(events: list[Event]) -> None:
    """Several events in one INSERT (ids, and so the log's order, follow the list), stamped now."""
    now = timezone.now()
    with connection.cursor() as cursor:
        for start in range(0, len(events), BATCH_ROWS):
            batch = events[start:start + BATCH_ROWS]
            params = []
            for e in batch:
                params += [e.task_id, e.item_id, e.type, _PAYLOAD.get_db_prep_save(e.payload, connection), e.actor,
                           now]
            cursor.execute(_INSERT + ", ".join([_ROW] * len(batch)), params)


def blob_ref(content) -> str:
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def blobs_put(contents: list) -> list[str]:
    """Store (possibly big) JSON values once each; return their references."""
    refs = [blob_ref(c) for c in contents]
    new = {ref: Blob(sha256=ref, content=c) for ref, c in zip(refs, contents, strict=True)}
    # one INSERT … ON CONFLICT DO NOTHING: no read first, no savepoint
    Blob.objects.bulk_create(list(new.values()), ignore_conflicts=True)
    return refs
