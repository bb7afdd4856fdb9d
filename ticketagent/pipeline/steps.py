"""An effect step, top to bottom: the intent (a phase), the call (no transaction open), the outcome (a phase).

    with phase(run):  intent_record(intent)            -- committed before the call
    effect_perform(intent, effect, deadline=...)       -- the lease known valid until the deadline
    with phase(run):  outcome_record(...) + the step's recovery point

Each effect gets its own three, in this order, in this function
(`run_effect_step`); nothing of one effect is recorded in another's phase.
Effect payloads are built only from persisted step outputs and the uploaded
ticket, so a re-run builds the same payload, the same key, and is blocked by
the ledger instead of acting twice.
"""

import logging
import time

from django.db import InterfaceError, OperationalError, connection, transaction

from ledger.channels import get_channel
from ledger.channels.base import CallResult, Cause
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
    Locked,
    TaskToWrite,
    item_fail,
    item_hand_back,
    item_requeue,
    item_stop,
    phase,
    phase_step_done,
    phase_wait,
    record_steps,
    steps_passed,
    stop_if_task_stopped,
)
from ticketagent.plan import (
    STEP_NAMES,
    after_rejection,
    chosen_actions,
    effect_action,
    effect_holds,
    effect_payload,
    steps_ahead,
)

log = logging.getLogger(__name__)

AUTO_CLOSE = "task option: allow automatic close"


def run_effect_step(step: str, run: ItemRun, task: Task) -> str:
    """One effect step. What was answered before it (rejected, held for a
    person, settled by reconcile or review, carried over) is recorded as the
    step's output; otherwise the intent (phase), the call (no transaction),
    the outcome with the step's recovery point (phase). Returns how the item
    ended ("": it goes on)."""
    held = effect_holds(run.outputs, allow_auto_close=task.allow_auto_close)
    rejected = _rejected(run, step, held)
    if rejected is not None:
        return phase_step_done(run, step, rejected)
    if step in held and run.item.approval != Approval.APPROVED:
        return _ask_approval(run, task, step, held)
    settled = _settled_before(run.item, step)
    if settled is not None:
        return phase_step_done(run, step, settled)
    authorized = f"approved by {run.item.approval_by}" if step in held else \
        AUTO_CLOSE if step == "close_ticket" else ""
    intent = _intent(run, task, step, authorized)
    with phase(run) as locked:
        ended = stop_if_task_stopped(run, locked)  # a pause or cancel since the last phase: nothing recorded
        recorded = None if ended else intent_record(intent)
    if ended:
        return ended
    if recorded.blocked:
        return _held_answer(step, run, recorded)
    result = _call(run, step, intent, recorded.effect)
    return phase_outcome(run, step, intent, recorded.effect, result)


def _call(run: ItemRun, step: str, intent: Intent, effect: Effect) -> CallResult:
    """The effect's call, in its channel's turn (`channel_turn`: while the channel's system is down, one
    caller probes it and the others wait), the lease known valid for the whole call: its deadline is the
    call's (`Lease.ensure`). A wait that ran out (CHANNEL_WAIT_SECONDS), a lease in doubt, or a deadline
    that came before the request could leave hand the item back with the effect not sent."""
    channel = get_channel(intent.spec.channel)
    try:
        with channel_turn(channel) as turn:
            try:
                deadline = run.lease.ensure(channel.max_call_seconds)
            except LeaseInDoubt as exc:
                raise _handed_back(run, step, str(exc), effect) from exc
            result = effect_perform(intent, effect, deadline=deadline, channel=channel)
            if result is None:
                raise _handed_back(run, step, "the lease was not known valid when the request was to leave", effect)
            turn.ended_with(result)
    except Waited as exc:
        raise _handed_back(run, step, exc.why, effect) from None
    return result


# A database error that passes -- the session ended (a restart, a failover, a cut link), a statement or a lock
# timed out, a deadlock -- while an outcome is recorded: the outcome is known in this worker's memory, so its
# phase is taken again, fenced like the first by the lease and the claim token, after a pause growing to the
# longest below, for as long as the lease confirmed before the error holds. After that the sweep takes the item
# over and the effect is unknown (reconcile or review).
TRANSIENT_DB_ERRORS = (OperationalError, InterfaceError)
OUTCOME_RETRY_FIRST_PAUSE, OUTCOME_RETRY_LONGEST_PAUSE = 0.2, 2.0


def phase_outcome(run: ItemRun, step: str, intent: Intent, effect: Effect, result: CallResult) -> str:
    """After the call: the outcome, with what it means for the item, in one
    phase. Committed: the step's recovery point (and the unchosen steps after
    it), then the item's end if no step is left. Failed: the item fails --
    or, when the system was unavailable, goes back to the queue. Unknown: it
    waits for review. Returns how the item ended ("": it goes on).

    The outcome is the truth and is recorded even when the lease is gone
    (the gate writes it only if the row is still this attempt's); nothing of
    the item's is, and the worker stops. A transient database error does not
    throw it away: the phase is taken again within the lease (above)."""
    skipped, after = steps_ahead(STEP_NAMES.index(step) + 1, run.outputs)  # (a rehearsal never gets here)
    # the task locked first when the item leaves in a way that writes it (it fails or waits for review); held
    # as it is when it may end done (`phase(ends=True)`: locked after all if it ends a run of failures)
    ends = result.state == EffectState.COMMITTED and after is None
    locked = result.state != EffectState.COMMITTED
    give_up_at, pause = None, OUTCOME_RETRY_FIRST_PAUSE
    while True:
        kept = run.cursor, run.outputs  # the phase moves `run` on as it writes: put back if it did not commit
        try:
            ours, ended = _outcome_phase(run, step, intent, effect, result, locked=locked, ends=ends,
                                         skipped=skipped, after=after)
            break
        except TaskToWrite:  # an item of the task failed since the last phase: this success ends that run
            locked = True
        except TRANSIENT_DB_ERRORS as exc:
            run.cursor, run.outputs = kept
            connection.close_if_unusable_or_obsolete()  # a session that ended is opened again by the next phase
            give_up_at = give_up_at or run.lease.valid_until()
            if time.monotonic() + pause > give_up_at:
                raise
            log.warning("item %s: %s's outcome (%s) not recorded: %s; recorded again in %.1f s", run.item.pk, step,
                        result.state, type(exc).__name__, pause)
            time.sleep(pause)
            pause = min(2 * pause, OUTCOME_RETRY_LONGEST_PAUSE)
    if not ours:
        raise LeaseLost(f"item {run.item.pk}: {step}'s effect stopped being this attempt's while it was called")
    return ended


def _outcome_phase(run: ItemRun, step: str, intent: Intent, effect: Effect, result: CallResult, *, locked: bool,
                   ends: bool, skipped: list, after: int | None) -> tuple[bool, str]:
    """The outcome's phase (`phase_outcome`): whether the outcome was this attempt's to record, and how the
    item ended."""
    try:
        with phase(run, task=locked, ends=ends) as held:
            if not outcome_record(intent, effect, result):
                return False, ""
            return True, _after_outcome(run, held, step, effect, result.cause, skipped, after)
    except LeaseLost:
        # the lease is gone (taken over while calling): nothing of the item's
        # is written, but the outcome is the truth -- kept if the row is still ours
        with transaction.atomic():
            outcome_record(intent, effect, result)
        raise


def _after_outcome(run: ItemRun, locked: Locked, step: str, effect: Effect, cause: str, skipped: list,
                   after: int | None) -> str:
    """Inside the outcome's phase, the outcome recorded: what it means for the item. Failed because the
    channel's system was unavailable (nothing of it done, nobody refused it): back to the queue, to wait
    for the system with the others; failed otherwise: the item fails, saying why (`failure_kind`)."""
    if effect.state == EffectState.FAILED and cause == Cause.UNAVAILABLE:
        words = failure_label(failure_kind(effect.channel, cause))  # "waiting for the helpdesk"
        return item_requeue(run, locked, why=f"{step}: {words}: {effect.last_error}")
    if effect.state == EffectState.FAILED:
        return item_fail(run, locked, kind=failure_kind(effect.channel, cause), message=f"{step}: {effect.last_error}")
    if effect.state == EffectState.UNKNOWN:
        return item_stop(run, locked, status=ItemStatus.WAITING_REVIEW, event_type=EventType.ITEM_WAITING,
                         reason=f"{step}: outcome unknown — {effect.last_error}")
    record_steps(run, [*steps_passed(run), (step, _effect_summary(effect)), *skipped])
    ended = stop_if_task_stopped(run, locked)
    if ended or after is not None:
        return ended
    return item_stop(run, locked, status=ItemStatus.DONE, event_type=EventType.ITEM_DONE, reason="")


def _handed_back(run: ItemRun, step: str, why: str, effect: Effect) -> LeaseLost:
    """Hand the item back with `effect` not sent; the `LeaseLost` that stops this worker."""
    item_hand_back(run, why=f"{step}: {why}", unsent=effect)
    return LeaseLost(f"item {run.item.pk}: handed back at {step}, nothing sent")


def _intent(run: ItemRun, task: Task, step: str, authorized_by: str) -> Intent:
    if task.rehearsal:  # the steps of a rehearsal end before any effect: this is a guard, never a path
        raise RuntimeError(f"task {task.pk} is a rehearsal: it sends nothing")
    payload = effect_payload(step, ticket=item_ticket(run.item), outputs=run.outputs)
    return intent_prepare(action=effect_action(step, notify_channel=task.notify_channel), payload=payload,
                          owner_task=str(task.pk), owner_item=run.item.ref, owner_step=step, claim_token=run.token,
                          authorized_by=authorized_by, summary=payload_summary(payload))


# --- what answers a step before its intent, or instead of its call ---------------------------------------------


def _origin_effect(item: Item, step: str) -> Effect | None:
    """For an item carried over from another task: the origin's effect for this step."""
    if not item.origin_id:
        return None
    return (Effect.objects.filter(owner_item=str(item.origin_id), owner_step=step)
            .exclude(state=EffectState.FAILED).order_by("-id").first())


def _effect_summary(effect: Effect) -> dict:
    return {"effect_id": effect.pk, "key": effect.idempotency_key, "state": effect.state,
            "external_ref": effect.external_ref}


def _ask_approval(run: ItemRun, task: Task, step: str, held: dict) -> str:
    """A step held for a person's approval: the item waits for the decision. One approval of the item covers
    every action it holds; a rejected item never asks (`_rejected`). The item's decision is as its lease read
    it: it is made only while the item waits, and every way back from waiting is a new attempt, leased anew."""
    waiting = "; ".join(f"{action} ({reason})" for action, reason in held.items()
                        if action in chosen_actions(run.outputs))
    return phase_wait(run, status=ItemStatus.WAITING_APPROVAL, event_type=EventType.APPROVAL_REQUESTED,
                      reason=f"held for approval: {waiting or f'{step} ({held[step]})'}")


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


def _held_answer(step: str, run: ItemRun, recorded) -> str:
    """Its key or slot is held by a row already (nothing was called): committed or skipped, that row's answer is
    the step's output; otherwise the item waits for review."""
    effect = recorded.effect
    summary = {**_effect_summary(effect), "blocked": recorded.blocked}
    if effect.state == EffectState.COMMITTED:
        return phase_step_done(run, step, summary)
    if effect.state == EffectState.SKIPPED:
        return phase_step_done(run, step, {**summary, "skipped": f"review decided to skip ({effect.reviewed_by})"})
    return phase_wait(run, status=ItemStatus.WAITING_REVIEW, event_type=EventType.ITEM_WAITING,
                      reason=f"{step}: outcome unknown — {effect.last_error or 'another attempt is in flight'}")
