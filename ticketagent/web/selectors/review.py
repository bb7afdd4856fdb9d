"""Reads for what needs a person: the attention counts, the review queue's sections and its audit trail."""

from dataclasses import dataclass

from django.core.paginator import Paginator
from django.db.models import Count, Max

from ledger.clock import db_now
from ledger.models import Effect, EffectState, EffectTransition
from ledger.services import reconcile_not_before
from ticketagent.channels.registry import get_channel
from ticketagent.eventlog.merged import transition_payload
from ticketagent.health import health_numbers
from ticketagent.models import AUDIT_EVENTS, Approval, Event, EventType, Item, ItemStatus, Task, TaskStatus
from ticketagent.web.selectors import effects_with_owners
from ticketagent.web.selectors.ops import item_decision

REVIEW_PAGE_SIZE = 50


@dataclass(frozen=True)
class Attention:
    """What needs a person, each acted on on Review; counted with the health numbers (`as_of`)."""

    unknown: int
    approvals: int
    failed: int  # failed items of tasks that need review
    suspended: int  # suspended tasks
    as_of: object = None  # when they were counted

    @property
    def total(self) -> int:
        return self.unknown + self.approvals + self.failed + self.suspended


def attention_counts() -> Attention:
    """Four counts from the health numbers' snapshot (`health.health_numbers`): the same count as the tiles'
    and "items by state", never a second one that may have moved on meanwhile."""
    h = health_numbers()
    return Attention(
        unknown=h["unknown"],
        approvals=h["items_by_state"].get(ItemStatus.WAITING_APPROVAL, 0),
        failed=h["failed_to_review"],
        suspended=h["tasks_by_state"].get(TaskStatus.SUSPENDED, 0),
        as_of=h["as_of"],
    )


def _call_evidence(effect: Effect, channel) -> None:
    """What is known about an unknown effect's call, in words (`effect.evidence`, `effect.resend_warning`)."""
    system = channel.label
    if effect.outcome_at is None:
        effect.evidence = ("No outcome was recorded: the worker stopped between recording the intent and recording "
                           "the outcome, so whether the call was made at all is not known.")
    elif effect.answered:
        effect.evidence = (f"The request was sent and {system} answered, but not with a yes: the answer "
                           f"cannot be read as done or not done.")
    else:
        effect.evidence = (f"The request was sent and no answer came back from {system} that proves it was handled "
                           f"(the connection dropped or timed out after sending, or a 5xx, which a gateway in front "
                           f"of it gives while the write may still go on): it may have been delivered, or may still "
                           f"be.")
    if channel.abilities.honours_key:
        effect.resend_warning = (f"“did not happen” sends it again with the same key; {system} refuses a "
                                 f"repeat of that key, so it cannot land twice.")
    else:
        effect.resend_warning = (f"“did not happen” sends it again: {system} does not refuse a repeat, so if it "
                                 f"did happen the customer gets it twice.")


def _check_from(effect: Effect, now) -> None:
    """When a look-up's "not found" can be trusted (`effect.check_from`), whether that is still to come
    (`effect.settling`) and why (`effect.settle_reason`): the rule reconcile applies (`reconcile_not_before`)."""
    effect.check_from = reconcile_not_before(effect) if effect.state == EffectState.UNKNOWN else None
    effect.settling = effect.check_from is not None and now < effect.check_from
    if effect.outcome_at is None:
        effect.settle_reason = "what its stopped worker sent may still land until then"
    elif effect.answered:
        effect.settle_reason = "a helpdesk that keeps answering without a yes is asked again after a pause"
    else:
        effect.settle_reason = "a request that got a 5xx or no answer may still land until then"


def with_evidence(effects) -> list[Effect]:
    """Effects with their owners (tickets), the call's evidence, the look-up's ability and when it can answer."""
    effects = effects_with_owners(effects)
    channels = {}
    now = db_now() if effects else None
    for effect in effects:
        if effect.channel not in channels:
            channels[effect.channel] = get_channel(effect.channel)
        channel = channels[effect.channel]
        effect.channel_label = channel.label
        effect.has_lookup = channel.supports_lookup
        _call_evidence(effect, channel)
        _check_from(effect, now)
    return effects


def review_unknown(page=1):
    """Unknown effects, oldest first, a page at a time, with their evidence."""
    unknown = Paginator(Effect.objects.filter(state=EffectState.UNKNOWN).order_by("intent_at", "id"),
                        REVIEW_PAGE_SIZE).get_page(page)
    unknown.object_list = with_evidence(unknown.object_list)
    return unknown


def review_approvals(page=1):
    """Items waiting for approval, each with what a person needs to decide on the spot: `decision` (the agent's
    actions and reason, what is held and why, the draft), the ticket's words, and `waiting_since` (when the
    approval was asked for)."""
    items = Paginator(Item.objects.filter(status=ItemStatus.WAITING_APPROVAL).select_related(
        "task", "checkpoint").order_by("updated_at", "id"), REVIEW_PAGE_SIZE).get_page(page)
    approvals_context(items)
    return items


def approvals_context(items) -> None:
    """Attach `decision` and `waiting_since` to each item (one query for the times)."""
    asked = dict(Event.objects.filter(item__in=[i.pk for i in items], type=EventType.APPROVAL_REQUESTED)
                 .values_list("item_id").annotate(at=Max("timestamp")))
    for item in items:
        checkpoint = getattr(item, "checkpoint", None)
        item.decision = item_decision(item, checkpoint)
        item.waiting_since = asked.get(item.pk) or item.updated_at


def review_failed(page=1):
    """Failed items of tasks that need review: retry or skip, each with its error."""
    return Paginator(Item.objects.filter(status=ItemStatus.FAILED, task__status=TaskStatus.NEEDS_REVIEW)
                     .select_related("task").order_by("task_id", "row"), REVIEW_PAGE_SIZE).get_page(page)


def suspended_tasks() -> list[Task]:
    """Suspended tasks, oldest first, each with `held` (its queued items, which wait for a resume: the task page
    counts the same) and `failed` (its failed items, which a resume retries)."""
    tasks = list(Task.objects.filter(status=TaskStatus.SUSPENDED).select_related("last_success_item")
                 .order_by("id")[:REVIEW_PAGE_SIZE])
    counts: dict[tuple, int] = {}
    for task_id, status, n in (Item.objects.filter(task__in=tasks, status__in=(ItemStatus.QUEUED, ItemStatus.FAILED))
                               .values_list("task_id", "status").annotate(n=Count("*"))):
        counts[task_id, status] = n
    for task in tasks:
        task.held = counts.get((task.pk, ItemStatus.QUEUED), 0)
        task.failed = counts.get((task.pk, ItemStatus.FAILED), 0)
    return tasks


AUDIT_TYPES = (EventType.REVIEWED, EventType.EFFECT_RECONCILED, EventType.APPROVED, EventType.REJECTED,
               EventType.ITEM_SKIPPED, EventType.ITEM_REQUEUED)


def _audit_words(event: Event) -> str:
    """One decision, as it was at the time (the event's own payload, not the effect's state now)."""
    p = event.payload
    if event.type in (EventType.REVIEWED, EventType.EFFECT_RECONCILED):
        verdict = {"happened": "happened", "not_happened": "did not happen — retry", "skip": "skip"}.get(
            p.get("verdict", ""), p.get("state", ""))
        note = p.get("note", "")
        if event.type == EventType.REVIEWED:
            reason = note.split(": ", 1)[1] if ": " in note else note
            return f"{p.get('step', '')}: review by {event.actor} — {verdict} — “{reason}”"
        return f"{p.get('step', '')}: reconcile — {verdict} — {note}"
    if event.type in (EventType.APPROVED, EventType.REJECTED):
        word = "approved" if event.type == EventType.APPROVED else {
            Approval.REJECTED: "rejected (the rest done)", Approval.STOPPED: "rejected (the item stopped)"}.get(
            p.get("decision"), "rejected")
        actions = ", ".join(p.get("actions") or [p.get("step", "")]) or "held actions"
        return f"{actions} {word} by {event.actor} — “{p.get('reason', '')}”"
    if event.type == EventType.ITEM_SKIPPED:
        return f"item skipped by {event.actor} — “{p.get('reason', '')}”"
    return f"item {p.get('why', 'retried')} (by {event.actor}), attempt {p.get('attempt', '?')}"


def audit_trail(n: int = 30) -> list[Event]:
    """The latest decisions by people and by reconcile: verdicts, approvals, skips and retries of failed items.
    Verdicts are the ledger's transitions (their one record), merged here with the task's events."""
    events = list(Event.objects.filter(AUDIT_EVENTS).select_related("item", "task")  # event_audit_idx
                  .only("id", "type", "payload", "actor", "timestamp", "task__id", "task__name",
                        "item__id", "item__ticket_id").order_by("-id")[:n])
    events = sorted([*events, *_verdicts(n)], key=lambda e: e.timestamp, reverse=True)[:n]
    for event in events:
        event.words = _audit_words(event)
    return events


def _verdicts(n: int) -> list[Event]:
    """The latest verdicts from the ledger's transition log, as (unsaved) events of their item."""
    rows = list(EffectTransition.objects.filter(event__in=(EventType.REVIEWED, EventType.EFFECT_RECONCILED))
                .exclude(snapshot={}).select_related("effect").order_by("-id")[:n])
    ids = {int(t.effect.owner_item) for t in rows if t.effect.owner_item.isdigit()}
    items = Item.objects.select_related("task").only("id", "ticket_id", "task__id", "task__name").in_bulk(ids)
    out = []
    for t in rows:
        item = items.get(int(t.effect.owner_item)) if t.effect.owner_item.isdigit() else None
        if item is None:
            continue  # not one of ours
        event = Event(task=item.task, item=item, type=t.event, actor=t.actor, timestamp=t.at,
                      payload=transition_payload(t.snapshot, t.from_state, t.note))
        out.append(event)
    return out
