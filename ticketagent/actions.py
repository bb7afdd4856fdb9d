"""The effect-class table: every action an agent can take on the world, registered with the ledger.

Data, not code paths: each action names its effect class and its channel;
each channel's adapter (`ticketagent.channels`) maps the action to its own
API. The setting LEDGER_ACTIONS names this table; the dashboard renders it
so operators can see what is guarded how.
"""

from ledger.actions import ActionSpec
from ledger.models import EffectClass

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


def payload_summary(payload: dict) -> str:
    """An effect's payload in one line for the ledger's pages: the ticket, then the fields, the body shortened."""
    body = payload.get("body", payload)
    if isinstance(body, dict):
        parts = [f"{k}={str(v)[:60]}" for k, v in body.items() if k != "body"]
        if "body" in body:
            parts.append(f"body={str(body['body'])[:80]!r}")
        text = f"ticket {payload.get('ticket', '?')}: " + ", ".join(parts)
    else:
        text = str(body)
    return text[:300]
