"""Why an item failed, as a kind (`Item.failure_kind`) and in people's words: the model's kinds and the channels'.

An effect that did not commit says why (`ledger.channels.base.Cause`); the
item's kind is its channel and that cause: `helpdesk_refused` (the helpdesk
said no: a request it names as wrong, a missing right, a ticket that does
not exist), `helpdesk_invalid` (the action cannot be made as asked: the
ticket id, the settings), `email_refused`, ... A `*_unavailable` effect
never fails its item: the item waits for the system (`pipeline.steps`).
"""

from ledger.channels.base import Cause
from ticketagent.channels.registry import CHANNEL_WORDS
from ticketagent.llm.base import ModelError

_CAUSE_WORDS = {
    Cause.REFUSED: "refused by {system}",
    Cause.UNAVAILABLE: "waiting for {system}",
    Cause.INVALID: "cannot be sent to {system} as asked (the ticket id or the settings)",
}
_OTHER_WORDS = {
    "conflict": "another decision holds the action's slot (conflict)",
    "input_changed": "the ticket changed since its checkpoint",
    "channel_refused": "refused by the helpdesk or the mail server",  # the one kind of items failed before
}


def failure_kind(channel: str, cause: str) -> str:
    """The kind of an item whose effect on `channel` did not commit for `cause` ("" counts as refused)."""
    return f"{channel}_{cause or Cause.REFUSED}"


def failure_label(kind: str) -> str:
    """A failure kind in people's words ("refused by the helpdesk", "model authentication failed")."""
    if kind in ModelError.KINDS:
        return ModelError.KINDS[kind]
    if kind in _OTHER_WORDS:
        return _OTHER_WORDS[kind]
    channel, _, cause = kind.rpartition("_")
    if channel in CHANNEL_WORDS and cause in _CAUSE_WORDS:
        return _CAUSE_WORDS[cause].format(system=CHANNEL_WORDS[channel])
    return kind.replace("_", " ")
