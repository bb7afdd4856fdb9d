"""Running an item: from its checkpoint to its end, under one lease.

Safe to run any number of times: the lease admits one worker, the
checkpoint skips finished steps and the ledger refuses repeated effects.
The pipeline does not know how it is scheduled: the RQ job around it is
`ticketagent.scheduling.runner.process_item`.
"""

import logging
import time
import uuid

from ticketagent.channels.identity import Helpdesk, IdentityUnknown
from ticketagent.channels.served import helpdesk_served
from ticketagent.llm.base import ModelError
from ticketagent.llm.clients import get_model_client
from ticketagent.llm.prices import usage_priced
from ticketagent.pipeline.allowance import CallAllowance, CallRefused
from ticketagent.pipeline.binding import NOT_THIS_HELPDESK, item_reroute
from ticketagent.pipeline.lease import HEARTBEATS, ItemRun, Lease, LeaseLost, worker_name
from ticketagent.pipeline.model_steps import run_model_step
from ticketagent.pipeline.phases import item_hand_back, lease_acquire, phase_done, phase_fail, phase_step_done
from ticketagent.pipeline.steps import run_effect_step
from ticketagent.plan import chosen_actions, steps_ahead, steps_of
from ticketagent.playbooks.services import published_spec
from ticketagent.stopping import process_stopping

log = logging.getLogger(__name__)


def item_process(*, item_id: int, attempt: int, model=None) -> str:
    """Run an item from its checkpoint. Safe to call any number of times: the
    lease admits one worker, the checkpoint skips finished steps and the
    ledger refuses repeated effects. Returns what happened, for the job log."""
    served, why_unknown = _served()
    token = uuid.uuid4().hex
    sent = time.monotonic()  # the lease is valid for LEASE_SECONDS from before its statement left
    why, item, checkpoint = lease_acquire(item_id, attempt, token, served=served, why_unknown=why_unknown)
    if item is None:
        if why.startswith(NOT_THIS_HELPDESK):
            log.warning("item %s not taken: %s; handed back to its task's queue, nothing written", item_id, why)
            item_reroute(item_id=item_id, attempt=attempt, actor=worker_name(), why=f"not taken: {why}")
        return f"no work: {why}"
    lease = Lease(item_id, token, sent)
    HEARTBEATS.add(lease)
    try:
        run = ItemRun(item=item, token=token, lease=lease, cursor=checkpoint.cursor,
                      outputs=dict(checkpoint.step_outputs))
        return _run_steps(run, model, spec=published_spec(item.playbook_version),
                          version_id=checkpoint.playbook_version_id)
    except LeaseLost as exc:
        log.warning("item %s: %s; stopped, nothing more called or written", item_id, exc)
        return f"stopped: {exc}"
    finally:
        HEARTBEATS.discard(lease)


def _served() -> tuple[Helpdesk | None, str]:
    """The helpdesk this process serves (asked once, then kept: `served.helpdesk_served`), or None and why."""
    try:
        return helpdesk_served(), ""
    except IdentityUnknown as exc:
        return None, str(exc)


def _run_steps(run: ItemRun, model, *, spec, version_id: int) -> str:
    """One loop of phases, from the checkpoint's cursor: a model step is
    "the model → its phase"; an effect step "phase → call → phase" (`steps.run_effect_step`), each under
    the playbook version `version_id` (`spec`) the checkpoint runs."""
    task = run.item.task
    model = model or get_model_client()
    steps = steps_of(rehearsal=task.rehearsal)  # a rehearsal ends after the decision: nothing is sent
    # a task with a budget: each model call reserves what it can cost first (pipeline/budget.py)
    allowance = CallAllowance(run) if task.has_budget else None
    cursor = run.cursor  # run.cursor is what the checkpoint holds; the unchosen steps passed are recorded later
    while cursor < len(steps):
        step = steps[cursor]
        if step.kind == "effect" and step.name not in chosen_actions(run.outputs):
            cursor += 1  # recorded (STEP_SKIPPED) with the next recovery point (`phases.steps_passed`)
            continue
        if step.kind == "effect":
            ended = run_effect_step(step.name, run, task)
        else:
            if process_stopping():  # the worker is stopping: the model's time is not the worker's grace
                item_hand_back(run, why=f"{step.name}: the worker is stopping")
                return f"handed back at {step.name}: the worker is stopping"
            try:
                output, calls, usage = run_model_step(model, step.name, run.item, run.outputs, spec=spec,
                                                      version_id=version_id, allowance=allowance)
            except CallRefused as exc:  # the item was handed back: its task reached its budget or stopped
                return f"stopped at {step.name}: {exc}"
            except ModelError as exc:
                if exc.kind == "unavailable":  # a rate limit or an outage is nobody's fault: back to the queue
                    item_hand_back(run, why=f"{step.name}: {exc.message}")
                    return f"handed back at {step.name}: {exc.message}"
                phase_fail(run, kind=exc.kind, message=f"{step.name}: {exc.message}")
                log.warning("item %s failed at %s: %s", run.item.pk, step.name, exc.message)
                return f"failed at {step.name}: {exc.kind}"
            # after the decision: the unchosen steps up to the next that runs commit with this step
            outputs = {**run.outputs, step.name: output}
            skipped = steps_ahead(cursor + 1, outputs, steps)[0] if "decide" in outputs else []
            ended = phase_step_done(run, step.name, output, calls, skipped=skipped, usage=usage_priced(usage),
                                    model=model.label)
        if ended:
            return "done" if ended == "done" else f"{ended} at {step.name}"
        cursor = run.cursor
    phase_done(run)
    return "done"
