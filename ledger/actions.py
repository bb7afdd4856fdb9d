"""The effect-class table: every action an agent can take on the world.

Data, not code paths: each action names its effect class, its channel and
how it is called. `once` and `irreversible` actions get a slot; the
dashboard renders this table so operators can see what is guarded how.
"""

from dataclasses import dataclass

from ledger.models import EffectClass


@dataclass(frozen=True)
class ActionSpec:
    name: str
    effect_class: str
    channel: str
    description: str
    method: str = "POST"
    path: str = ""

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
            method="PUT", path="/api/tickets/{ticket}/draft",
        ),
        ActionSpec(
            "notify_customer", EffectClass.ONCE, "helpdesk",
            "Send the reply to the customer through the helpdesk.",
            path="/api/tickets/{ticket}/notify",
        ),
        ActionSpec(
            "notify_customer_email", EffectClass.ONCE, "email",
            "Send the reply to the customer by email (SMTP).",
        ),
        ActionSpec(
            "set_status", EffectClass.ONCE, "helpdesk",
            "Change the ticket's status in the helpdesk.",
            path="/api/tickets/{ticket}/status",
        ),
        ActionSpec(
            "escalate", EffectClass.ONCE, "helpdesk",
            "Hand the ticket to a human team.",
            path="/api/tickets/{ticket}/escalate",
        ),
        ActionSpec(
            "close_ticket", EffectClass.IRREVERSIBLE, "helpdesk",
            "Close the ticket (needs 'allow automatic close' or an operator's approval).",
            path="/api/tickets/{ticket}/close",
        ),
    )
}


def action_spec(name: str) -> ActionSpec:
    try:
        return ACTIONS[name]
    except KeyError:
        raise ValueError(f"unknown action {name!r}; known: {', '.join(sorted(ACTIONS))}") from None
