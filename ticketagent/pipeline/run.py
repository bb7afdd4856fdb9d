"""Running an item: the RQ job's entry point, from the item's checkpoint to its end.

Safe to run any number of times: the lease admits one worker, the
checkpoint skips finished steps and the ledger refuses repeated effects.
"""

import logging
import time
import uuid

from django.db import close_old_connections, connection

from ticketagent.llm.base import ModelError
from ticketagent.llm.clients import get_model_client
from ticketagent.llm.schemas import Decision
from ticketagent.pipeline.lease import Heartbeat, ItemRun, Lease, LeaseLost
from ticketagent.pipeline.phases import lease_acquire, phase_done, phase_fail, phase_step_done
from ticketagent.pipeline.steps import RECORDED, WAIT, chain_intent, run_effect_step, run_model_step, steps_ahead
from ticketagent.plan import NOT_CHOSEN, STEPS
from ticketagent.recovery import item_settle_unknowns

log = logging.getLogger(__name__)


def item_process(*, item_id: int, attempt: int, model=None) -> str:
    """Run an item from its checkpoint. Safe to call any number of times: the
    lease admits one worker, the checkpoint skips finished steps and the
    ledger refuses repeated effects. Returns what happened, for the job log."""
    token = uuid.uuid4().hex
    sent = time.monotonic()  # the lease is valid for LEASE_SECONDS from before its statement left
    why, item, checkpoint = lease_acquire(item_id, attempt, token)
    if item is None:
        return f"no work: {why}"
    lease = Lease(item_id, token, sent)
    heartbeat = Heartbeat(lease)
    heartbeat.start()
    try:
        run = ItemRun(item=item, token=token, cursor=checkpoint.cursor, outputs=dict(checkpoint.step_outputs),
                      lease=lease)
        return _run_steps(run, model)
    except LeaseLost as exc:
        log.warning("item %s: %s; stopped, nothing more called or written", item_id, exc)
        return f"stopped: {exc}"
    finally:
        heartbeat.stop()


def _run_steps(run: ItemRun, model) -> str:
    task = run.item.task
    model = model or get_model_client()
    cursor = run.cursor
    while cursor < len(STEPS):
        step = STEPS[cursor]
        if step.kind == "effect":
            if step.name not in Decision.model_validate(run.outputs["decide"]).actions:
                # recorded (STEP_SKIPPED) with the next recovery point
                run.pending.append((step.name, dict(NOT_CHOSEN)))
                cursor += 1
                continue
            output = run_effect_step(step.name, run, task)
            if output is WAIT:
                return f"waiting at {step.name}"
            if output is RECORDED:
                if run.finished:
                    return "done"
                if run.stopped:
                    return f"task stopped after {step.name}"
                cursor = run.cursor
                continue
            if not phase_step_done(run, step.name, output):
                return f"task stopped after {step.name}"
            cursor = run.cursor
            continue
        try:
            output, calls = run_model_step(model, step.name, run.item, run.outputs)
        except ModelError as exc:
            phase_fail(run, kind=exc.kind, message=f"{step.name}: {exc.message}")
            return f"failed at {step.name}: {exc.kind}"
        # after the decision: the unchosen steps up to the next that runs, and
        # that one's intent, commit with this step (chained intents)
        outputs = {**run.outputs, step.name: output}
        skipped, after = steps_ahead(cursor + 1, outputs) if "decide" in outputs else ([], cursor + 1)
        if not phase_step_done(run, step.name, output, calls, skipped=skipped,
                               chain=chain_intent(run, task, after, outputs)):
            return f"task stopped after {step.name}"
        cursor = run.cursor
    phase_done(run)
    return "done"


# A connection whose last job ended cleanly this recently is not health-checked again.
FRESH_CONNECTION_SECONDS = 1.0
_last_clean_end = [0.0]


def process_item(item_id: int, attempt: int) -> str:
    """The RQ job (`ticketagent.jobs.JOB_FUNCTION`): run one attempt of an item."""
    # A worker that runs jobs in its own process keeps its database
    # connection between jobs: drop it first if it broke or grew too old
    # (a database restart), and after a job that left it unusable. The
    # health check (a `SELECT 1`, CONN_HEALTH_CHECKS) is for a connection that
    # sat idle: one whose last job ended cleanly moments ago is used as it is
    # (a statement and a transaction an item less in a busy worker).
    close_old_connections()
    if connection.connection is not None and time.monotonic() - _last_clean_end[0] < FRESH_CONNECTION_SECONDS:
        connection.health_check_done = True
    _last_clean_end[0] = 0.0
    try:
        outcome = item_process(item_id=item_id, attempt=attempt)
        _after_item(item_id, outcome)
        return outcome
    finally:
        close_old_connections()
        if connection.connection is not None and not connection.errors_occurred:
            _last_clean_end[0] = time.monotonic()


def _after_item(item_id: int, outcome: str) -> None:
    """What the worker does once an item stops waiting for an answer: settle
    its answered unknowns at once. (The task's window was topped up when the
    item's lease was taken, in the same transaction.)"""
    if not outcome.startswith("waiting at "):
        return
    try:
        item_settle_unknowns(item_id)
    except Exception:  # noqa: BLE001 - the recovery sweep does it too
        log.exception("after item %s", item_id)
