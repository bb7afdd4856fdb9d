"""The steps of an item: a model step (recompute) or an effect step through the ledger's gate.

Effect payloads are built only from persisted step outputs and the uploaded
ticket, so a re-run builds the same payload, the same key, and is blocked by
the ledger instead of acting twice.
"""

from ledger.gate import effect_run
from ledger.models import Effect, EffectState
from ticketagent.llm.schemas import Reply, Triage
from ticketagent.models import EventType, Item, ItemStatus, Task
from ticketagent.pipeline.lease import ItemRun, LeaseLost, hold
from ticketagent.pipeline.phases import phase_fail, phase_wait, record_steps, stop_if_task_stopped
from ticketagent.pipeline.tools import item_tools
from ticketagent.plan import effect_action, effect_payload


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


def _close_approval(run: ItemRun, task: Task):
    """close_ticket is irreversible: (who authorized it, None), or ("", the step's output / WAIT)."""
    if task.allow_auto_close:
        return "task option: allow automatic close", None
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


def run_effect_step(step, run: ItemRun, task: Task):
    """Returns the step output to record, RECORDED when the gate's phase 2
    recorded it with the effect's outcome, or WAIT when the item stopped
    (failed / waits)."""
    item = run.item
    authorized = ""
    if step == "close_ticket":
        authorized, early = _close_approval(run, task)
        if early is not None:
            return early
    settled = _settled_before(item, step)
    if settled is not None:
        return settled
    recorded = {}

    def record_with_outcome(effect: Effect) -> None:
        # inside phase 2, the item locked by the fence: the step's recovery
        # point commits with the effect's outcome
        if effect.state == EffectState.COMMITTED:
            recorded["checkpoint"] = record_steps(run, [*run.pending, (step, _effect_summary(effect))])
            recorded["stopped"] = stop_if_task_stopped(run)

    result = effect_run(
        action=effect_action(step, notify_channel=task.notify_channel),
        payload=effect_payload(step, ticket=item_ticket(item), outputs=run.outputs),
        owner_task=str(task.pk), owner_item=item.ref, owner_step=step, lease_token=run.token,
        fence=lambda: hold(run), authorized_by=authorized, then=record_with_outcome,
    )
    if result.blocked == "fenced":
        raise LeaseLost(f"item {item.pk}: fenced while calling {step}")
    if "checkpoint" in recorded:
        run.cursor, run.outputs = recorded["checkpoint"]
        run.pending = []
        run.stopped = recorded["stopped"]
        return RECORDED
    return _gate_answer(step, run, result)


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
