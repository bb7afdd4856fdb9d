"""Appending to the event log. Call inside the transaction of the change."""

import hashlib
import json

from ticketagent.models import Blob, Event


def event_append(*, task_id: int, type: str, payload: dict | None = None, item_id: int | None = None,
                 actor: str = "") -> Event:
    return Event.objects.create(task_id=task_id, item_id=item_id, type=type, payload=payload or {}, actor=actor)


def events_append(events: list[Event]) -> None:
    """Several events in one INSERT (ids, and so the log's order, follow the list)."""
    Event.objects.bulk_create(events, batch_size=2000)


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
