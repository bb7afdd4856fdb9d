"""Running an item: the RQ job's entry point, from the item's checkpoint to its end.

Safe to run any number of times: the lease admits one worker, the
checkpoint skips finished steps and the ledger refuses repeated effects.
"""

import logging
import uuid

from django.db import close_old_connections

from ticketagent.llm.base import ModelError
from ticketagent.llm.clients import get_model_client
from ticketagent.llm.schemas import Decision
from ticketagent.pipeline.lease import Heartbeat, ItemRun, LeaseLost, task_of_item
from ticketagent.pipeline.phases import lease_acquire, phase_done, phase_fail, phase_step_done
from ticketagent.pipeline.steps import RECORDED, WAIT, run_effect_step, run_model_step
from ticketagent.plan import NOT_CHOSEN, STEPS
from ticketagent.recovery import item_settle_unknowns
from ticketagent.window import window_refill

log = logging.getLogger(__name__)


def item_process(*, item_id: int, attempt: int, model=None) -> str:
    """Run an item from its checkpoint. Safe to call any number of times: the
    lease admits one worker, the checkpoint skips finished steps and the
    ledger refuses repeated effects. Returns what happened, for the job log."""
    token = uuid.uuid4().hex
    why, item, checkpoint = lease_acquire(item_id, attempt, token)
    if item is None:
        return f"no work: {why}"
    heartbeat = Heartbeat(item_id, token)
    heartbeat.start()
    try:
        run = ItemRun(item=item, token=token, cursor=checkpoint.cursor, outputs=dict(checkpoint.step_outputs))
        return _run_steps(run, model)
    except LeaseLost as exc:
        return f"stopped: {exc}"
    finally:
        heartbeat.stop()


def _run_steps(run: ItemRun, model) -> str:
    task = run.item.task
    model = model or get_model_client()
    cursor = run.cursor
    while cursor < len(STEPS):
        step = STEPS[cursor]
        calls = []
        if step.kind == "model":
            try:
                output, calls = run_model_step(model, step.name, run.item, run.outputs)
            except ModelError as exc:
                phase_fail(run, kind=exc.kind, message=f"{step.name}: {exc.message}")
                return f"failed at {step.name}: {exc.kind}"
        else:
            decision = Decision.model_validate(run.outputs["decide"])
            if step.name not in decision.actions:
                # recorded (STEP_SKIPPED) with the next recovery point
                run.pending.append((step.name, dict(NOT_CHOSEN)))
                cursor += 1
                continue
            output = run_effect_step(step.name, run, task)
            if output is WAIT:
                return f"waiting at {step.name}"
            if output is RECORDED:
                cursor += 1
                if run.stopped:
                    return f"task stopped after {step.name}"
                continue
        if not phase_step_done(run, step.name, output, calls):
            return f"task stopped after {step.name}"
        cursor += 1
    phase_done(run)
    return "done"


def process_item(item_id: int, attempt: int) -> str:
    """The RQ job (`ticketagent.jobs.JOB_FUNCTION`): run one attempt of an item."""
    # A worker that runs jobs in its own process keeps its database
    # connection between jobs: drop it first if it broke or grew too old
    # (a database restart), and after a job that left it unusable.
    close_old_connections()
    try:
        outcome = item_process(item_id=item_id, attempt=attempt)
        _after_item(item_id, outcome)
        return outcome
    finally:
        close_old_connections()


def _after_item(item_id: int, outcome: str) -> None:
    """What the worker does once an item stops: settle its answered unknowns at
    once, and top its task's window up (a job out of Redis, one in)."""
    try:
        if outcome.startswith("waiting at "):
            item_settle_unknowns(item_id)
        task_id = task_of_item(item_id)
        if task_id is not None:
            window_refill(task_id)
    except Exception:  # noqa: BLE001 - the recovery sweep does both too
        log.exception("after item %s", item_id)
