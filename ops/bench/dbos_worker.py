"""The peer's worker process: the same ticket pipeline written on DBOS Transact (`python -m ops.bench.dbos_worker`).

    python -m ops.bench.dbos_worker --database-url postgres://…/ticketagent_bench_dbos --executor-id w1

One workflow per ticket (`ticket_pipeline`), on one queue (`tickets`): three
model steps (triage, draft, decide) through the same model client as the
product, then one checkpointed step per helpdesk call the decision chose,
built by the same `effect_payload` and sent by the same `RestHelpdeskChannel`
with an `Idempotency-Key` derived from the workflow id and the step (what
DBOS's documentation recommends: the same key on every retry and recovery).
A helpdesk step that does not end committed raises, and DBOS retries it
(`HELPDESK_ATTEMPTS` attempts, 0.1 s apart, doubling) — DBOS's own way with a
failed step; a call that landed but whose answer was lost is then made again,
and only a receiver that honours the key keeps it from landing twice.

Each process is one DBOS executor (its own `executor_id`) running at most
one workflow at a time (`worker_concurrency=1`, as an rq worker runs one
job; `PEER_CONCURRENCY=N`: N at once, in DBOS's executor threads), polling
the queue every `--polling` seconds (default 0.01: polling is not the limit).
Fully offline: no Conductor key, no OTLP, no DBOS Cloud variables (the bench
strips `DBOS__*` from the environment). It prints one JSON line
`{"dbos_ready": "<executor id>"}` once it listens; SIGTERM or SIGINT stops it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import threading

QUEUE = "tickets"
WORKFLOW = "ticket_pipeline"
APP_NAME = "ticketagent-peer"
APP_VERSION = "bench-1"
HELPDESK_ATTEMPTS = 3
EFFECT_STEPS = ("save_draft", "notify_customer", "set_status", "escalate", "close_ticket")


class HelpdeskCallFailed(Exception):
    """A helpdesk call that did not end committed: DBOS retries the step."""


def define_workflow():
    """Register the workflow and its steps with DBOS (after DBOS(config=…))."""
    from dbos import DBOS

    from ledger.actions import action_spec
    from ledger.channels.base import CallDeadline
    from ledger.models import EffectState
    from ops.bench.naive import job_tools
    from ticketagent.channels.rest import RestHelpdeskChannel
    from ticketagent.llm.clients import get_model_client
    from ticketagent.llm.schemas import Reply, Triage
    from ticketagent.plan import effect_payload

    channel = RestHelpdeskChannel()

    @DBOS.step(name="triage")
    def triage_step(ticket: dict) -> dict:
        return get_model_client().triage(ticket).model_dump()

    @DBOS.step(name="draft")
    def draft_step(ticket: dict, triage: dict) -> dict:
        return get_model_client().draft(ticket, Triage.model_validate(triage), job_tools()).model_dump()

    @DBOS.step(name="decide")
    def decide_step(ticket: dict, triage: dict, reply: dict) -> dict:
        return get_model_client().decide(ticket, Triage.model_validate(triage),
                                         Reply.model_validate(reply)).model_dump()

    @DBOS.step(name="helpdesk", retries_allowed=True, max_attempts=HELPDESK_ATTEMPTS, interval_seconds=0.1,
               backoff_rate=2.0)
    def helpdesk_step(step: str, payload: dict, key: str) -> dict:
        result = channel.perform(action_spec(step), payload, key, CallDeadline.within(channel.max_call_seconds + 1.0))
        if result.state != EffectState.COMMITTED:
            raise HelpdeskCallFailed(f"{step}: {result.state}: {result.error}")
        return {"step": step, "ref": result.external_ref}

    @DBOS.workflow(name=WORKFLOW)
    def ticket_pipeline(ticket: dict) -> dict:
        triage = triage_step(ticket)
        reply = draft_step(ticket, triage)
        decision = decide_step(ticket, triage, reply)
        outputs = {"triage": triage, "draft": reply, "decide": decision}
        done = {}
        for step in EFFECT_STEPS:
            if step in decision["actions"]:
                key = hashlib.sha256(f"{DBOS.workflow_id}\x1f{step}".encode()).hexdigest()
                done[step] = helpdesk_step(step, effect_payload(step, ticket=ticket, outputs=outputs), key)
        return done

    return ticket_pipeline


def dbos_config(database_url: str, executor_id: str, concurrency: int = 1) -> dict:
    """DBOS's configuration; with `concurrency` workflows at once, as many executor threads and a system
    database pool to match (DBOS's own knobs for an I/O-bound queue)."""
    config = {"name": APP_NAME, "system_database_url": database_url, "executor_id": executor_id,
              "application_version": APP_VERSION, "enable_otlp": False, "log_level": "WARNING",
              "sys_db_pool_size": 5 if concurrency == 1 else min(concurrency + 5, 100)}
    if concurrency > 1:
        config["max_executor_threads"] = concurrency + 4
    return config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True, help="DBOS's system database (created if missing)")
    parser.add_argument("--executor-id", required=True)
    parser.add_argument("--polling", type=float, default=0.01, help="queue polling interval, seconds")
    args = parser.parse_args(argv)
    for name in [n for n in os.environ if n.startswith("DBOS__")]:
        del os.environ[name]  # never DBOS Cloud or Conductor
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketagent.settings")
    import django

    django.setup()
    from dbos import DBOS

    concurrency = int(os.environ.get("PEER_CONCURRENCY", "1"))  # workflows at once in this process
    DBOS(config=dbos_config(args.database_url, args.executor_id, concurrency))
    define_workflow()
    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=concurrency, polling_interval_sec=args.polling,
                        on_conflict="always_update")
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stopping.set())
    sys.stdout.write(json.dumps({"dbos_ready": args.executor_id}) + "\n")
    sys.stdout.flush()
    stopping.wait()
    DBOS.destroy(workflow_completion_timeout_sec=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
