"""The effect-class table: every action an agent can take on the world.

Data, not code paths: each action names its effect class and its channel;
each channel's adapter (`ledger.channels`) maps the action to its own API.
`once` and `irreversible` actions get a slot; the dashboard renders this
table so operators can see what is guarded how.
"""

from dataclasses import dataclass

from ledger.models import EffectClass


@dataclass(frozen=True)
class ActionSpec:
    name: str
    effect_class: str
    channel: str
    description: str

    @property
    def slotted(self) -> bool:
        return self.effect_class in (EffectClass.ONCE, EffectClass.IRREVERSIBLE)

    @property
    def needs_approval(self) -> bool:
        """Irreversible actions never run without a recorded approval."""
        return self.effect_class == EffectClass.IRREVERSIBLE


ACTIONS: dict[str, ActionSpec] = {
    spec.name: spec
    for spec in (
        ActionSpec(
            "save_draft", EffectClass.OVERWRITE, "helpdesk",
            "Save the drafted reply on the ticket (same content may be written again).",
        ),
        ActionSpec(
            "notify_customer", EffectClass.ONCE, "helpdesk",
            "Send the reply to the customer through the helpdesk.",
        ),
        ActionSpec(
            "notify_customer_email", EffectClass.ONCE, "email",
            "Send the reply to the customer by email (SMTP).",
        ),
        ActionSpec(
            "set_status", EffectClass.ONCE, "helpdesk",
            "Change the ticket's status in the helpdesk.",
        ),
        ActionSpec(
            "escalate", EffectClass.ONCE, "helpdesk",
            "Hand the ticket to a human team.",
        ),
        ActionSpec(
            "close_ticket", EffectClass.IRREVERSIBLE, "helpdesk",
            "Close the ticket (needs 'allow automatic close' or an operator's approval).",
        ),
    )
}


def action_spec(name: str) -> ActionSpec:
    try:
        return ACTIONS[name]
    except KeyError:
        raise ValueError(f"unknown action {name!r}; known: {', '.join(sorted(ACTIONS))}") from None
