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
EFFECT_STEPS = tuple(s.name for s in STEPS if s.kind == "effect")
# the effect steps that carry the draft to the helpdesk or the customer: held when a reply check fails
REPLY_ACTIONS = ("save_draft", "notify_customer")
IRREVERSIBLE_HOLD = "irreversible: closing waits for an operator's approval"
# The output of an effect step the decision did not choose (a STEP_SKIPPED event, not STEP_DONE).
NOT_CHOSEN = {"skipped": "not chosen by the decision"}


def steps_of(*, rehearsal: bool) -> tuple[Step, ...]:
    """The steps an item runs: all of them, or for a rehearsal the model steps only (nothing is sent)."""
    return STEPS[: len(MODEL_STEPS)] if rehearsal else STEPS


def chosen_actions(outputs: dict) -> list[str]:
    """The actions that run: the decide step's output, as the rules let it (`playbooks.rules.decision_review`)."""
    return list(outputs["decide"]["actions"])


def effect_holds(outputs: dict, *, allow_auto_close: bool) -> dict[str, str]:
    """The actions that wait for a person's approval, and why: those the rules or a failed reply check
    held, and `close_ticket` (irreversible) unless the task allows an automatic close."""
    held = dict(outputs["decide"].get("held") or {})
    if not allow_auto_close:
        held.setdefault("close_ticket", IRREVERSIBLE_HOLD)
    return held


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


# where `escalate` sends a ticket: the playbook category's field -> the payload's
ESCALATE_FIELDS = {"rt_queue": "queue", "rt_owner": "owner", "zendesk_group": "group"}


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
        target = decision.get("escalate_to") or {}  # the category's, per helpdesk (the playbook)
        body.update({name: target[key] for key, name in ESCALATE_FIELDS.items() if target.get(key)})
    elif step == "close_ticket":
        body = {"reason": decision.get("reason", "")[:1000]}
    else:  # pragma: no cover - the plan is fixed
        raise ValueError(f"{step} is not an effect step")
    return {"ticket": ticket["ticket_id"], "body": body}
