"""The steps of an item: a model step (recompute) or an effect step through the ledger's gate.

Effect payloads are built only from persisted step outputs and the uploaded
ticket, so a re-run builds the same payload, the same key, and is blocked by
the ledger instead of acting twice.
"""

from django.db import connection, transaction
from django.utils import timezone

from ledger.channels.registry import get_channel
from ledger.gate import effect_call, effect_prepare, intent_commit, intent_record
from ledger.keys import Intent
from ledger.models import Effect, EffectState
from ledger.statements import Rider, intent_ctes, intent_written
from ticketagent.llm.schemas import Decision, Reply, Triage
from ticketagent.models import ACTIVE_TASK_STATUSES, Event, EventType, Item, ItemStatus, Task
from ticketagent.pipeline.lease import ItemRun, LeaseInDoubt, LeaseLost, hold, lease_fence, lock_run
from ticketagent.pipeline.phases import (
    checkpoint_ctes,
    item_done_fenced,
    item_hand_back,
    phase_fail,
    phase_wait,
    record_steps,
    step_events,
    stop_if_task_stopped,
)
from ticketagent.pipeline.tools import item_tools
from ticketagent.plan import NOT_CHOSEN, STEP_NAMES, STEPS, effect_action, effect_payload
from ticketagent.services.tasks import task_locked


def item_ticket(item: Item) -> dict:
    return {"ticket_id": item.ticket_id, "customer_email": item.customer_email,
            "customer_name": item.customer_name, "subject": item.subject, "body": item.body,
            "priority": item.priority, "language": item.language}


def run_model_step(model, step: str, item: Item, outputs: dict) -> tuple[dict, list]:
    ticket = item_ticket(item)
    if step == "triage":
        return model.triage(ticket).model_dump(), []
    triage = Triage.model_validate(outputs["triage"])
    if step == "draft":
        tools = item_tools(item)
        reply = model.draft(ticket, triage, tools)
        return reply.model_dump(), tools.calls
    reply = Reply.model_validate(outputs["draft"])
    return model.decide(ticket, triage, reply).model_dump(), []


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


def _close_approval(run: ItemRun, task: Task):
    """close_ticket is irreversible: (who authorized it, None), or ("", the step's output / WAIT)."""
    if task.allow_auto_close:
        return AUTO_CLOSE, None
    current = Item.objects.only("approval", "approval_by").get(pk=run.item.pk)
    if current.approval == "rejected":
        return "", {"skipped": f"close rejected by {current.approval_by}"}
    if current.approval != "approved":
        phase_wait(run, status=ItemStatus.WAITING_APPROVAL, event_type=EventType.APPROVAL_REQUESTED,
                   reason="close_ticket is irreversible and waits for an operator's approval")
        return "", WAIT
    return f"approved by {current.approval_by}", None


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


def steps_ahead(after: int, outputs: dict) -> tuple[list, int | None]:
    """From the step at `after` on: the effect steps the decision did not choose
    up to the next step that runs (recorded as skipped with the current
    recovery point), and that step's index (None: the item's end)."""
    skipped = []
    for index in range(after, len(STEPS)):
        step = STEPS[index]
        if step.kind == "model" or step.name in Decision.model_validate(outputs["decide"]).actions:
            return skipped, index
        skipped.append((step.name, dict(NOT_CHOSEN)))
    return skipped, None


def chain_intent(run: ItemRun, task: Task, index: int | None, outputs: dict) -> Intent | None:
    """The intent of the effect step at `index`, to commit with the current
    recovery point ("chained intents"), when nothing has to be asked first:
    a first attempt, not carried over, not an approval to wait for."""
    if index is None or STEPS[index].kind != "effect" or run.item.attempt != 1 or run.item.origin_id:
        return None
    step = STEPS[index].name
    if step == "close_ticket" and not task.allow_auto_close:
        return None
    return effect_prepare(action=effect_action(step, notify_channel=task.notify_channel),
                          payload=effect_payload(step, ticket=item_ticket(run.item), outputs=outputs),
                          owner_task=str(task.pk), owner_item=run.item.ref, owner_step=step, lease_token=run.token,
                          authorized_by=AUTO_CLOSE if step == "close_ticket" else "")


def run_effect_step(step, run: ItemRun, task: Task):
    """Returns the step output to record, RECORDED when the gate's phase 2
    recorded it with the effect's outcome, or WAIT when the item stopped
    (failed / waits)."""
    chained, run.chained = run.chained, None
    if chained is not None and chained[0].owner_step == step:
        intent, effect, blocked = chained  # committed with the previous recovery point
    else:
        item, authorized = run.item, ""
        if step == "close_ticket":
            authorized, early = _close_approval(run, task)
            if early is not None:
                return early
        settled = _settled_before(item, step)
        if settled is not None:
            return settled
        intent = effect_prepare(action=effect_action(step, notify_channel=task.notify_channel),
                                payload=effect_payload(step, ticket=item_ticket(item), outputs=run.outputs),
                                owner_task=str(task.pk), owner_item=item.ref, owner_step=step, lease_token=run.token,
                                authorized_by=authorized)
        effect, blocked = intent_commit(intent, fence=lease_fence(run))
    skipped, after = steps_ahead(STEP_NAMES.index(step) + 1, run.outputs)
    next_intent = chain_intent(run, task, after, run.outputs)
    fence, then = _with_outcome(run, task, step, effect, skipped, after, next_intent)
    fold = _folded_outcome(run, task, step, effect, skipped, after, next_intent)
    deadline = None if blocked else _lease_for_call(run, step, intent, effect)
    result = effect_call(intent, effect, blocked, then=then, outcome_fence=fence, fold=fold, deadline=deadline)
    if result.blocked == "expired":
        raise _handed_back(run, step, "the lease was not known valid when the request was to leave", effect)
    if result.blocked == "fenced":
        raise LeaseLost(f"item {run.item.pk}: fenced while calling {step}")
    if result.answers is not None:
        return _after_folded(run, fold, result.answers)
    if then.recorded:
        return RECORDED
    return _gate_answer(step, run, result)


def _lease_for_call(run: ItemRun, step: str, intent: Intent, effect: Effect) -> float | None:
    """After the intent committed, before its call: the lease known valid for
    the whole call (renewed first if need be); the call's deadline. A lease
    in doubt (a heartbeat failed, an answer came back too late) hands the
    item back with the effect not sent; a lost one stops the worker."""
    if run.lease is None:
        return None
    try:
        return run.lease.ensure(get_channel(intent.spec.channel).max_call_seconds)
    except LeaseInDoubt as exc:
        raise _handed_back(run, step, str(exc), effect) from exc


def _handed_back(run: ItemRun, step: str, why: str, effect: Effect) -> LeaseLost:
    """Hand the item back with `effect` not sent; the `LeaseLost` that stops this worker."""
    item_hand_back(run, why=f"{step}: {why}", unsent=effect)
    return LeaseLost(f"item {run.item.pk}: handed back at {step}, nothing sent")


def _with_outcome(run: ItemRun, task: Task, step: str, effect: Effect, skipped: list, after: int | None,
                  next_intent: Intent | None):
    """Phase 2's fence and `then`. When the call committed, the fence is the
    step's recovery point (and the unchosen steps after it): the checkpoint
    moves on the condition of the lease, which locks the item (one statement
    with its events); with it the item's end when no step is left (the task
    locked first: the lock order everywhere), else the next effect's intent
    (chained). Any other outcome records no step: the fence only holds the
    item (and the task, for the last step, whose failure or wait follows)."""
    done = []

    def fence(result) -> None:
        if result.state != EffectState.COMMITTED:
            lock_run(run) if after is None else hold(run)
            return
        extra = []
        if after is None:
            locked = task_locked(task.pk)
            if locked.status in ACTIVE_TASK_STATUSES:
                done.append(locked)
                extra.append(Event(task_id=task.pk, item_id=run.item.pk, type=EventType.ITEM_DONE))
        summary = {"effect_id": effect.pk, "key": effect.idempotency_key, "state": result.state,
                   "external_ref": result.external_ref[:200]}
        then.recorded = record_steps(run, [*run.pending, (step, summary), *skipped], extra=extra, fenced=True)

    def then(effect: Effect) -> None:
        if not then.recorded:
            return
        run.cursor, run.outputs = then.recorded
        run.pending = []
        if done:
            item_done_fenced(done[0], run.item.pk)
            run.finished = True
            return
        run.stopped = stop_if_task_stopped(run)
        if next_intent is not None and not run.stopped:
            run.chained = (next_intent, *intent_record(next_intent))

    then.recorded = None
    return fence, then


def _folded_outcome(run: ItemRun, task: Task, step: str, effect: Effect, skipped: list, after: int | None,
                    next_intent: Intent | None):
    """Phase 2 as one statement (the gate's `fold`), for a committed call
    with a step after it: the outcome; on the condition that it was written
    and the lease held (`ok`), the step's recovery point (`cp`, `ev`) and,
    if the task is still active, the next effect's intent (chained); the
    task's status read. The item's end, and every other outcome, go through
    the transaction of `_with_outcome`."""

    def fold(result):
        if result.state != EffectState.COMMITTED or after is None:
            return None
        summary = {"effect_id": effect.pk, "key": effect.idempotency_key, "state": result.state,
                   "external_ref": result.external_ref[:200]}
        cursor, outputs, events = step_events(run, [*run.pending, (step, summary), *skipped])
        ctes, params = checkpoint_ctes(run, cursor, outputs, events, when="EXISTS (SELECT 1 FROM ok)")
        tasks = connection.ops.quote_name(Task._meta.db_table)
        ctes += f", ts AS (SELECT status FROM {tasks} WHERE id = %s)"
        params.append(task.pk)
        answers = "(SELECT count(*) FROM cp), (SELECT status FROM ts)"
        fold.landed = (cursor, outputs, None, None)
        if next_intent is not None:
            active = ", ".join(["%s"] * len(ACTIVE_TASK_STATUSES))
            sql, intent_params, chained = intent_ctes(
                next_intent, timezone.now(), name="ni",
                when=f"EXISTS (SELECT 1 FROM cp) AND (SELECT status FROM ts) IN ({active})",
                when_params=ACTIVE_TASK_STATUSES)
            ctes, answers, params = f"{ctes}, {sql}", f"{answers}, (SELECT id FROM ni)", [*params, *intent_params]
            fold.landed = (cursor, outputs, next_intent, chained)
        return lease_fence(run), Rider(ctes=ctes, params=params, answers=answers)

    return fold


def _after_folded(run: ItemRun, fold, answers: tuple):
    """After a folded phase 2 committed: move on, as `_with_outcome`'s `then` does."""
    moved, status, *chained_id = answers
    if not moved:
        raise LeaseLost(f"item {run.item.pk}: its checkpoint is not at cursor {run.cursor}")
    run.cursor, run.outputs, next_intent, chained = fold.landed
    run.pending, run.task_status = [], status
    if status not in ACTIVE_TASK_STATUSES:
        with transaction.atomic():  # hand the item back under its lock, as the phase would have
            hold(run)
            run.stopped = stop_if_task_stopped(run)
    elif chained is not None and chained_id[0] is not None:
        run.chained = (next_intent, intent_written(chained, next_intent, chained_id[0]), "")
    return RECORDED


def _gate_answer(step: str, run: ItemRun, result):
    """The step's output from the gate's answer when phase 2 did not record it."""
    effect = result.effect
    summary = _effect_summary(effect)
    if result.blocked:
        summary["blocked"] = result.blocked
    if effect.state == EffectState.COMMITTED:
        return summary
    if effect.state == EffectState.SKIPPED:
        return {**summary, "skipped": f"review decided to skip ({effect.reviewed_by})"}
    if effect.state == EffectState.FAILED:
        why = "slot taken by another payload (conflict)" if result.blocked == "conflict" else effect.last_error
        phase_fail(run, kind="channel_refused" if not result.blocked else "conflict", message=f"{step}: {why}")
        return WAIT
    phase_wait(run, status=ItemStatus.WAITING_REVIEW, event_type=EventType.ITEM_WAITING,
               reason=f"{step}: outcome unknown — {effect.last_error or 'another attempt is in flight'}")
    return WAIT
