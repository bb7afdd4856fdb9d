"""The baseline for the overhead figure: the same work with no durability.

`naive_item(ticket)` is an RQ job that makes the calls the durable pipeline
makes for one ticket -- triage, draft (with the knowledge-base tool), decide
through the same model client, then one HTTP call to the helpdesk for each
chosen action, built by the same `effect_payload` and sent by the same
`RestHelpdeskChannel` with the same `Idempotency-Key` header -- and nothing
else: no lease, no checkpoint, no event, no ledger row, no database at all.
It is what "just call the API from a job" would look like, and what a
crash would lose.

Each finished job pushes its wall-clock end time onto a Redis list so the
runner can tell when the batch is done (`DONE_KEY`).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from django.conf import settings

DONE_KEY = "ticketagent-bench:naive:done"
EFFECT_STEPS = ("save_draft", "notify_customer", "set_status", "escalate", "close_ticket")


def job_tools():
    """The draft step's tools without a database: the knowledge base read
    from disk, no look-up of the customer's other tickets (shared with the
    DBOS peer, ops/bench/dbos_worker.py)."""
    from ticketagent.llm.base import Tools

    def knowledge_base(query: str):
        # read from disk on each call, as the durable pipeline's tool does
        entries = json.loads((Path(settings.BASE_DIR) / "docs" / "knowledge_base.json").read_text())
        q = query.lower()
        hits = [e for e in entries if e["topic"] == q or any(k in q for k in e["keywords"])]
        return hits[:3] or [e for e in entries if e["topic"] == "other"]

    return Tools(customer_tickets=lambda: [], knowledge_base=knowledge_base)


def naive_item(ticket: dict) -> str:
    from rq import get_current_job

    from ledger.actions import action_spec
    from ledger.channels.base import CallDeadline
    from ticketagent.channels.rest import RestHelpdeskChannel
    from ticketagent.llm.clients import get_model_client
    from ticketagent.plan import effect_payload

    model = get_model_client()
    triage = model.triage(ticket)
    reply = model.draft(ticket, triage, job_tools())
    decision = model.decide(ticket, triage, reply)
    outputs = {"triage": triage.model_dump(), "draft": reply.model_dump(), "decide": decision.model_dump()}
    channel = RestHelpdeskChannel()
    results = []
    for step in EFFECT_STEPS:
        if step not in decision.actions:
            continue
        payload = effect_payload(step, ticket=ticket, outputs=outputs)
        key = hashlib.sha256(f"naive\x1f{ticket['ticket_id']}\x1f{step}".encode()).hexdigest()
        # the naive worker has no lease: its call's deadline is its channel's longest call and a second's room
        # (the channel asks for its whole longest call before anything leaves)
        results.append(channel.perform(action_spec(step), payload, key,
                                       CallDeadline.within(channel.max_call_seconds + 1.0)).state)
    job = get_current_job()
    if job is not None:
        job.connection.rpush(DONE_KEY, repr(time.time()))
    return ",".join(results)
