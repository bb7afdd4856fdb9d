"""The plan: an item's steps, named and ordered, with a version.

Model steps (`recompute`) produce persisted data; effect steps act on the
world through the ledger's gate, building their payload only from that
persisted data and from the uploaded ticket (never from model text for
recipients or ticket ids).
"""

from dataclasses import dataclass

PLAN_VERSION = 1
# Checkpoints written under these plan versions can be continued by this code.
SUPPORTED_PLAN_VERSIONS = frozenset({1})


@dataclass(frozen=True)
class Step:
    name: str
    kind: str  # "model" or "effect"


STEPS: tuple[Step, ...] = (
    Step("triage", "model"),
    Step("draft", "model"),
    Step("decide", "model"),
    Step("save_draft", "effect"),
    Step("notify_customer", "effect"),
    Step("set_status", "effect"),
    Step("escalate", "effect"),
    Step("close_ticket", "effect"),
)
STEP_NAMES = tuple(s.name for s in STEPS)
MODEL_STEPS = tuple(s.name for s in STEPS if s.kind == "model")
# The output of an effect step the decision did not choose (a STEP_SKIPPED event, not STEP_DONE).
NOT_CHOSEN = {"skipped": "not chosen by the decision"}


def not_chosen(output) -> bool:
    return output == NOT_CHOSEN


def step_name(cursor: int | None) -> str:
    """The step an item's checkpoint points at (the next one to run)."""
    cursor = cursor or 0
    return STEPS[cursor].name if cursor < len(STEPS) else "finished"


def effect_action(step: str, *, notify_channel: str) -> str:
    """The ledger action an effect step performs."""
    if step == "notify_customer" and notify_channel == "email":
        return "notify_customer_email"
    return step


def effect_payload(step: str, *, ticket: dict, outputs: dict) -> dict:
    """Build an effect's payload from the ticket and persisted step outputs."""
    reply, decision, triage = outputs["draft"], outputs["decide"], outputs["triage"]
    body: dict
    if step == "save_draft":
        body = {"subject": reply["subject"], "body": reply["body"]}
    elif step == "notify_customer":
        body = {"to": ticket["customer_email"], "subject": reply["subject"], "body": reply["body"]}
    elif step == "set_status":
        body = {"status": decision.get("status") or "pending"}
    elif step == "escalate":
        body = {"note": f"{triage['priority']} {triage['category']}: {triage['summary']}"[:1000]}
    elif step == "close_ticket":
        body = {"reason": decision.get("reason", "")[:1000]}
    else:  # pragma: no cover - the plan is fixed
        raise ValueError(f"{step} is not an effect step")
    return {"ticket": ticket["ticket_id"], "body": body}
