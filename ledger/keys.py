"""What an intent is before it is written: its payload's hash, its idempotency key, its slot and summary."""

import hashlib
import json
from dataclasses import dataclass

from ledger.actions import ActionSpec


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
    """A payload in one line for people (an owner may give a better one: `Intent.build(summary=)`)."""
    return canonical_json(payload)[:300]


@dataclass(frozen=True)
class Intent:
    """Everything phase 1 records: what is asked for, by whom, under which key and slot."""

    spec: ActionSpec
    payload: dict
    owner_task: str
    owner_item: str
    owner_step: str
    claim_token: str
    authorized_by: str
    p_hash: str
    key: str
    slot: str | None
    summary: str

    @classmethod
    def build(cls, *, spec: ActionSpec, payload: dict, owner_task: str, owner_item: str, owner_step: str,
              claim_token: str, authorized_by: str, summary: str = "") -> "Intent":
        p_hash = payload_hash(payload)
        key = idempotency_key(owner_task=owner_task, owner_item=owner_item, owner_step=owner_step,
                              action=spec.name, p_hash=p_hash)
        slot = slot_for(owner_task=owner_task, owner_item=owner_item, owner_step=owner_step,
                        action=spec.name) if spec.slotted else None
        return cls(spec=spec, payload=payload, owner_task=owner_task, owner_item=owner_item, owner_step=owner_step,
                   claim_token=claim_token, authorized_by=authorized_by, p_hash=p_hash, key=key, slot=slot,
                   summary=(summary or summarize(payload))[:300])
