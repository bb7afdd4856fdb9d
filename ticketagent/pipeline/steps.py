"""The steps of an item: a model step (recompute) or an effect step through the ledger's gate.

Effect payloads are built only from persisted step outputs and the uploaded
ticket, so a re-run builds the same payload, the same key, and is blocked by
the ledger instead of acting twice.
"""

import logging
import time
from dataclasses import fields, replace

from django.db import InterfaceError, OperationalError, connection, transaction

from ledger.channels import get_channel
from ledger.channels.base import CallResult, Cause, Channel
from ledger.gate import effect_perform, intent_prepare, intent_record, outcome_record
from ledger.keys import Intent
from ledger.models import Effect, EffectState
from ticketagent.actions import payload_summary
from ticketagent.channels.waiting import Waited, channel_turn
from ticketagent.failures import failure_kind, failure_label
from ticketagent.models import Approval, EventType, Item, ItemStatus, Task
from ticketagent.pipeline.lease import ItemRun, LeaseInDoubt, LeaseLost
from ticketagent.pipeline.model_steps import item_ticket
from ticketagent.pipeline.phases import (
    TaskToWrite,
    done_locks_task,
    item_fail,
    item_hand_back,
    item_requeue,
    item_stop,
    phase,
    phase_wait,
    record_steps,
    stop_if_task_stopped,
)
from ticketagent.plan import (
    NOT_CHOSEN,
    STEP_NAMES,
    STEPS,
    after_rejection,
    chosen_actions,
    effect_action,
    effect_holds,
    effect_payload,
)

log = logging.getLogger(__name__)


def _origin_effect(item: Item, step: str) -> Effect | None:
    """For an item carried over from another task: the origin's effect for this step."""
    if not item.origin_id:
        return None
    return (Effect.objects.filter(owner_item=str(item.origin_id), owner_step=step)
            .exclude(state=EffectState.FAILED).order_by("-id").first())


def _effect_summary(effect: Effect) -> dict:
    return {"effect_id": effect.pk, "key": effect.idempotency_key, "state": effect.state,
            "external_ref": effect.external_ref}


RECORDED = object()  # an effect step whose recovery point was written with the effect's outcome


WAIT = object()  # the item stopped here: it failed or waits for a person


AUTO_CLOSE = "task option: allow automatic close"


def _approval(run: ItemRun, task: Task, step: str, why: str):
    """A step held for a person's approval (`why`): (who authorized it, None), or ("", WAIT) while the
    item waits for the decision. One approval of the item covers every action it holds; a rejected item
    never asks (`_rejected`). The item's decision is as its lease read it: it is made only while the item
    waits, and every way back from waiting is a new attempt, leased anew."""
    if run.item.approval != Approval.APPROVED:
        held = effect_holds(run.outputs, allow_auto_close=task.allow_auto_close)
        waiting = "; ".join(f"{action} ({reason})" for action, reason in held.items()
                            if action in chosen_actions(run.outputs))
        phase_wait(run, status=ItemStatus.WAITING_APPROVAL, event_type=EventType.APPROVAL_REQUESTED,
                   reason=f"held for approval: {waiting or f'{step} ({why})'}")
        return "", WAIT
    return f"approved by {run.item.approval_by}", None


def _rejected(run: ItemRun, step: str, held: dict) -> dict | None:
    """After "reject, do the rest": the step's output when it does not run (`plan.after_rejection`), else None."""
    if run.item.approval != Approval.REJECTED:
        return None
    why = after_rejection(step, run.outputs, held)
    if not why:
        return None
    if why == "rejected":
        return {"skipped": f"{step} rejected by {run.item.approval_by}"}
    return {"skipped": f"not run: {why} (rejected by {run.item.approval_by})"}


def _settled_before(item: Item, step: str) -> dict | None:
    """The step's output when its effect was settled outside this attempt, else None."""
    if item.attempt > 1:
        # Settled by reconcile or review while the item waited (every way
        # back from waiting is a new attempt): continue from that answer
        # (going through the gate again would count a duplicate).
        resolved = (Effect.objects.filter(owner_item=item.ref, owner_step=step, state__in=(
            EffectState.COMMITTED, EffectState.SKIPPED)).exclude(resolved_by="").first())
        if resolved is not None:
            out = {**_effect_summary(resolved), "resolved_by": resolved.resolved_by}
            if resolved.state == EffectState.SKIPPED:
                out["skipped"] = f"review decided to skip ({resolved.reviewed_by})"
            return out
    origin = _origin_effect(item, step)
    if origin is not None:
        return {"skipped": f"already initiated by item {origin.owner_item} of task {origin.owner_task} "
                           f"({origin.state})", "effect_id": origin.pk}
    return None


def steps_ahead(after: int, outputs: dict, steps=STEPS) -> tuple[list, int | None]:
    """From the step at `after` on (of the item's `steps`): the effect steps the
    decision did not choose up to the next step that runs (recorded as skipped
    with the current recovery point), and that step's index (None: the item's end)."""
    skipped = []
    for index in range(after, len(steps)):
        step = steps[index]
        if step.kind == "model" or step.name in chosen_actions(outputs):
            return skipped, index
        skipped.append((step.name, dict(NOT_CHOSEN)))
    return skipped, None


def _intent(run: ItemRun, task: Task, step: str, outputs: dict, authorized_by: str = "") -> Intent:
    if task.rehearsal:  # the steps of a rehearsal end before any effect: this is a guard, never a path
        raise RuntimeError(f"task {task.pk} is a rehearsal: it sends nothing")
    payload = effect_payload(step, ticket=item_ticket(run.item), outputs=outputs)
    return intent_prepare(action=effect_action(step, notify_channel=task.notify_channel), payload=payload,
                          owner_task=str(task.pk), owner_item=run.item.ref, owner_step=step, claim_token=run.token,
                          authorized_by=authorized_by, summary=payload_summary(payload))


def chain_intent(run: ItemRun, task: Task, index: int | None, outputs: dict) -> Intent | None:
    """The intent of the effect step at `index`, to commit with the current
    recovery point ("chained intents"), when nothing has to be asked first:
    a first attempt, not carried over, not an approval to wait for."""
    if index is None or STEPS[index].kind != "effect" or run.item.attempt != 1 or run.item.origin_id:
        return None
    step = STEPS[index].name
    if step in effect_holds(outputs, allow_auto_close=task.allow_auto_close):
        return None  # asked first
    return _intent(run, task, step, outputs, AUTO_CLOSE if step == "close_ticket" else "")


def run_effect_step(step: str, run: ItemRun, task: Task):
    """One effect step: the intent (phase), the call (no transaction), the
    outcome with the step's recovery point (phase). Returns RECORDED when
    that phase recorded the step, WAIT when the item stopped before the call
    (it waits or failed), or the step's output to record (the effect was
    settled before, or its key or slot is held already)."""
    chained, run.chained = run.chained, None
    if chained is not None and chained[0].owner_step == step:
        intent, recorded = chained  # committed with the previous recovery point
    else:
        authorized = AUTO_CLOSE if step == "close_ticket" else ""
        held = effect_holds(run.outputs, allow_auto_close=task.allow_auto_close)
        rejected = _rejected(run, step, held)
        if rejected is not None:
            return rejected
        if step in held:
            authorized, early = _approval(run, task, step, held[step])
            if early is not None:
                return early
        settled = _settled_before(run.item, step)
        if settled is not None:
            return settled
        intent = _intent(run, task, step, run.outputs, authorized)
        with phase(run):
            recorded = intent_record(intent)
    if recorded.blocked:
        return _held_answer(step, run, recorded)
    effect = recorded.effect
    result = _call(run, step, intent, effect)
    phase_outcome(run, task, step, intent, effect, result)
    return RECORDED


# A database error that passes -- the session ended (a restart, a failover, a cut link), a statement or a lock
# timed out, a deadlock -- while an outcome is recorded: the outcome is known in this worker's memory, so its
# phase is taken again, fenced like the first by the lease and the claim token, after a pause growing to the
# longest below, for as long as the lease confirmed before the error holds. After that the sweep takes the item
# over and the effect is unknown (reconcile or review).
TRANSIENT_DB_ERRORS = (OperationalError, InterfaceError)
OUTCOME_RETRY_FIRST_PAUSE, OUTCOME_RETRY_LONGEST_PAUSE = 0.2, 2.0


def _call(run: ItemRun, step: str, intent: Intent, effect: Effect) -> CallResult:
    """The effect's call, in its channel's turn (`channel_turn`: while the channel's system is down, one
    caller probes it and the others wait), the lease known valid for the whole call. A wait that ran out
    (CHANNEL_WAIT_SECONDS), a lease in doubt, or a deadline that came before the request could leave hand
    the item back with the effect not sent."""
    channel = get_channel(intent.spec.channel)
    try:
        with channel_turn(channel) as turn:
            deadline = _lease_for_call(run, step, effect, channel)
            result = effect_perform(intent, effect, deadline=deadline, channel=channel)
            if result is None:
                raise _handed_back(run, step, "the lease was not known valid when the request was to leave", effect)
            turn.ended_with(result)
    except Waited as exc:
        raise _handed_back(run, step, exc.why, effect) from None
    return result


def phase_outcome(run: ItemRun, task: Task, step: str, intent: Intent, effect: Effect, result) -> None:
    """After the call: the outcome, with what it means for the item, in one
    phase. Committed: the step's recovery point (and the unchosen steps after
    it), then the item's end if no step is left, else the next effect's
    intent (chained). Failed: the item fails -- or, when the system was
    unavailable, goes back to the queue. Unknown: it waits for review.

    The outcome is the truth and is recorded even when the lease is gone
    (the gate writes it only if the row is still this attempt's); nothing of
    the item's is, and the worker stops. A transient database error does not
    throw it away: the phase is taken again within the lease (above)."""
    skipped, after = steps_ahead(STEP_NAMES.index(step) + 1, run.outputs)  # (a rehearsal never gets here)
    # the task locked first when the item leaves in a way that writes it: it fails or waits for review, or it is
    # done and ends a run of failures (held as it is if it may end done: `phase(ends=True)`)
    ends = result.state == EffectState.COMMITTED and after is None
    locked = result.state != EffectState.COMMITTED or (ends and done_locks_task(run))
    give_up_at, pause = None, OUTCOME_RETRY_FIRST_PAUSE
    while True:
        kept = replace(run)  # the phase moves `run` on as it writes: put back if it did not commit
        try:
            ours = _outcome_phase(run, task, step, intent, effect, result, locked=locked, ends=ends,
                                  skipped=skipped, after=after)
            break
        except TaskToWrite:  # an item of the task failed since the last phase: this success ends that run
            locked = True
        except TRANSIENT_DB_ERRORS as exc:
            for name in (f.name for f in fields(run)):
                setattr(run, name, getattr(kept, name))
            connection.close_if_unusable_or_obsolete()  # a session that ended is opened again by the next phase
            if give_up_at is None:
                give_up_at = run.lease.valid_until() if run.lease is not None else 0.0
            if time.monotonic() + pause > give_up_at:
                raise
            log.warning("item %s: %s's outcome (%s) not recorded: %s; recorded again in %.1f s", run.item.pk, step,
                        result.state, type(exc).__name__, pause)
            time.sleep(pause)
            pause = min(2 * pause, OUTCOME_RETRY_LONGEST_PAUSE)
    if not ours:
        raise LeaseLost(f"item {run.item.pk}: {step}'s effect stopped being this attempt's while it was called")


def _outcome_phase(run: ItemRun, task: Task, step: str, intent: Intent, effect: Effect, result, *, locked: bool,
                   ends: bool, skipped: list, after: int | None) -> bool:
    """The outcome's phase (`phase_outcome`); True when the outcome was this attempt's to record."""
    try:
        with phase(run, task=locked, ends=ends):
            ours = outcome_record(intent, effect, result)
            if ours:
                _after_outcome(run, task, step, effect, result.cause, skipped, after)
    except LeaseLost:
        # the lease is gone (taken over while calling): nothing of the item's
        # is written, but the outcome is the truth -- kept if the row is still ours
        with transaction.atomic():
            outcome_record(intent, effect, result)
        raise
    return ours


def _after_outcome(run: ItemRun, task: Task, step: str, effect: Effect, cause: str, skipped: list,
                   after: int | None) -> None:
    """Inside the outcome's phase, the outcome recorded: what it means for the item. Failed because the
    channel's system was unavailable (nothing of it done, nobody refused it): back to the queue, to wait
    for the system with the others; failed otherwise: the item fails, saying why (`failure_kind`)."""
    if effect.state == EffectState.FAILED and cause == Cause.UNAVAILABLE:
        words = failure_label(failure_kind(effect.channel, cause))  # "waiting for the helpdesk"
        item_requeue(run, why=f"{step}: {words}: {effect.last_error}")
    elif effect.state == EffectState.FAILED:
        item_fail(run, kind=failure_kind(effect.channel, cause), message=f"{step}: {effect.last_error}")
    elif effect.state == EffectState.UNKNOWN:
        item_stop(run, status=ItemStatus.WAITING_REVIEW, event_type=EventType.ITEM_WAITING,
                  reason=f"{step}: outcome unknown — {effect.last_error}")
    else:
        record_steps(run, [*run.pending, (step, _effect_summary(effect)), *skipped])
        if stop_if_task_stopped(run):
            return
        if after is None:
            item_stop(run, status=ItemStatus.DONE, event_type=EventType.ITEM_DONE, reason="")
            return
        chained = chain_intent(run, task, after, run.outputs)
        if chained is not None:
            run.chained = (chained, intent_record(chained))


def _lease_for_call(run: ItemRun, step: str, effect: Effect, channel: Channel) -> float | None:
    """After the intent committed, before its call: the lease known valid for
    the whole call (renewed first if need be); the call's deadline. A lease
    in doubt (a heartbeat failed, an answer came back too late) hands the
    item back with the effect not sent; a lost one stops the worker."""
    if run.lease is None:
        return None
    try:
        return run.lease.ensure(channel.max_call_seconds)
    except LeaseInDoubt as exc:
        raise _handed_back(run, step, str(exc), effect) from exc


def _handed_back(run: ItemRun, step: str, why: str, effect: Effect) -> LeaseLost:
    """Hand the item back with `effect` not sent; the `LeaseLost` that stops this worker."""
    item_hand_back(run, why=f"{step}: {why}", unsent=effect)
    return LeaseLost(f"item {run.item.pk}: handed back at {step}, nothing sent")


def _held_answer(step: str, run: ItemRun, recorded):
    """The step's output when its key or slot is held by a row already (nothing was called)."""
    effect = recorded.effect
    summary = {**_effect_summary(effect), "blocked": recorded.blocked}
    if effect.state == EffectState.COMMITTED:
        return summary
    if effect.state == EffectState.SKIPPED:
        return {**summary, "skipped": f"review decided to skip ({effect.reviewed_by})"}
    phase_wait(run, status=ItemStatus.WAITING_REVIEW, event_type=EventType.ITEM_WAITING,
               reason=f"{step}: outcome unknown — {effect.last_error or 'another attempt is in flight'}")
    return WAIT
