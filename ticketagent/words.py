"""People's words for the states of tasks, items and effects: the one mapping every page and export header uses.

The words are the `TextChoices` labels ("waiting for approval"), so a
model's `get_status_display()` and a count keyed by the raw value
(`health.items_by_state`, an effect's `state`) read the same. A value that
is no state comes back with its underscores as spaces.
"""

from ledger.models import EffectState, Verdict
from ticketagent.models import ItemStatus, TaskStatus

STATE_WORDS: dict[str, str] = {**dict(EffectState.choices), **dict(TaskStatus.choices), **dict(ItemStatus.choices),
                               **{k: v for k, v in Verdict.choices if k}}  # and a review's verdict ("not_happened")


def state_words(value) -> str:
    """"waiting_approval" -> "waiting for approval"; "" for nothing."""
    value = "" if value is None else str(value)
    return STATE_WORDS.get(value) or value.replace("_", " ")
