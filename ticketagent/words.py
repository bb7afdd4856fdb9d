"""People's words for the states of tasks, items and effects and for the log's events: the one mapping every page
and export header uses.

The words are the `TextChoices` labels ("waiting for approval"), so a
model's `get_status_display()` and a count keyed by the raw value
(`health.items_by_state`, an effect's `state`) read the same. A value that
is no state comes back with its underscores as spaces.
"""

from ledger.models import EffectState, Verdict
from ticketagent.models import EventType, ItemStatus, TaskStatus

STATE_WORDS: dict[str, str] = {**dict(EffectState.choices), **dict(TaskStatus.choices), **dict(ItemStatus.choices),
                               **{k: v for k, v in Verdict.choices if k}}  # and a review's verdict ("not_happened")


def state_words(value) -> str:
    """"waiting_approval" -> "waiting for approval"; "" for nothing."""
    value = "" if value is None else str(value)
    return STATE_WORDS.get(value) or value.replace("_", " ")


# The log's event types where their name alone would not say it ("ITEM_REQUEUED" -> "requeued"); the others read as
# their name in lower case ("EFFECT_COMMITTED" -> "effect committed").
EVENT_WORDS = {
    EventType.ITEM_STARTED: "attempt started", EventType.STEP_DONE: "step done",
    EventType.STEP_SKIPPED: "step skipped: not chosen by the decision", EventType.TOOL_CALL: "tool call",
    EventType.ITEM_REQUEUED: "requeued", EventType.REVIEWED: "verdict by review",
    EventType.EFFECT_RECONCILED: "verdict by reconcile", EventType.RECOVERED: "lease taken over",
    EventType.ITEM_WAITING: "waiting for a person", EventType.ITEM_STOPPED: "handed back (task paused)",
    EventType.EFFECT_FENCED: "outcome refused (lease lost)", EventType.TASK_STATUS: "task status",
    EventType.PLAN_CARRIED: "plan carried from the rehearsal", EventType.PLAN_RECOMPUTED: "decided again",
    EventType.HELPDESK_BOUND: "bound to its helpdesk",
}


def event_words(value) -> str:
    """"ITEM_REQUEUED" -> "requeued"; "EFFECT_COMMITTED" -> "effect committed"."""
    value = "" if value is None else str(value)
    return EVENT_WORDS.get(value) or value.replace("_", " ").lower()
