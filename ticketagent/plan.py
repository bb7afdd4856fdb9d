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


def steps_ahead(after: int, outputs: dict, steps: tuple[Step, ...] = STEPS) -> tuple[list, int | None]:
    """From the step at `after` on (of the item's `steps`): the effect steps the
    decision did not choose up to the next step that runs (recorded as skipped
    with the current recovery point), and that step's index (None: the item's end)."""
    skipped = []
    for index in range(after, len(steps)):
        step = steps[index]
        if step.kind == "model" or step.name in chosen_actions(outputs):
            return skipped, index
        skipped.append((step.name, dict(NOT_CHOSEN)))
    return skipped, None


def effect_holds(outputs: dict, *, allow_auto_close: bool) -> dict[str, str]:
    """The actions that wait for a person's approval, and why: those the rules or a failed reply check
    held, and `close_ticket` (irreversible) unless the task allows an automatic close."""
    held = dict(outputs["decide"].get("held") or {})
    if not allow_auto_close:
        held.setdefault("close_ticket", IRREVERSIBLE_HOLD)
    return held


def held_for_approval(decide: dict, *, allow_auto_close: bool) -> dict[str, str]:
    """What an item with this decision will hold for a person, and why: `effect_holds` of the actions it runs
    (a rule's hold or a failed reply check of an action not chosen holds nothing). The one answer for the
    pipeline's wait, Review, the item page, the dry-run and a rehearsal's "Held for approval" (which go live
    then holds, irreversible closes included)."""
    if not decide:
        return {}
    actions = set(decide.get("actions") or ())
    held = effect_holds({"decide": decide}, allow_auto_close=allow_auto_close)
    return {action: why for action, why in held.items() if action in actions}


def steps_to_run(outputs: dict, steps, cursor: int) -> list[str]:
    """The steps from `cursor` on that an item with these outputs will run: every model step, and the effect
    steps its decision chose (all of them while it has not decided yet)."""
    decide = outputs.get("decide")
    return [s.name for s in steps[cursor:] if s.kind == "model" or not decide or s.name in decide.get("actions", ())]


# The statuses whose meaning rests on a reply having been sent (and what each says to a person).
AFTER_REPLY_STATUSES = {"pending": "waiting for the customer", "solved": "the customer has an answer"}


def status_to_set(decision: dict) -> str:
    """The status `set_status` sets: the decision's, else `pending` (waiting for the customer)."""
    return decision.get("status") or "pending"


def after_rejection(step: str, outputs: dict, held) -> str:
    """The one rule for "reject, do the rest": why `step` does not run after a person rejected what the
    item held (`held`: its held actions), "" when it runs.

    A held action never runs: a rejection approves none of them. When one of them carries the reply (the
    reply was rejected), no step runs whose meaning rests on the reply having been sent: the reply's
    carriers, a status that follows a reply (`AFTER_REPLY_STATUSES`), and a close (it would end a ticket
    whose customer got no answer). Everything else runs as decided: an escalation, a status such as
    `escalated`, `open` or `on_hold`."""
    if step in held:
        return "rejected"
    if not any(action in REPLY_ACTIONS for action in held):
        return ""
    if step in REPLY_ACTIONS:
        return "it carries the rejected reply"
    if step == "set_status":
        status = status_to_set(outputs["decide"])
        if status in AFTER_REPLY_STATUSES:
            return f"status {status} ({AFTER_REPLY_STATUSES[status]}) follows a reply, and the reply was rejected"
    if step == "close_ticket":
        return "closing would end a ticket whose customer got no answer: the reply was rejected"
    return ""


def rejection_outcome(outputs: dict, held, *, cursor: int) -> tuple[list[str], dict[str, str]]:
    """What "reject, do the rest" would do from the step at `cursor` on: the chosen effect steps that run,
    and those that do not (step -> why, `after_rejection`)."""
    runs, not_run = [], {}
    for step in STEPS[cursor:]:
        if step.kind != "effect" or step.name not in chosen_actions(outputs):
            continue
        why = after_rejection(step.name, outputs, held)
        if why:
            not_run[step.name] = why
        else:
            runs.append(step.name)
    return runs, not_run


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
        body = {"status": status_to_set(decision)}
    elif step == "escalate":
        body = {"note": f"{triage['priority']} {triage['category']}: {triage['summary']}"[:1000]}
        target = decision.get("escalate_to") or {}  # the category's, per helpdesk (the playbook)
        body.update({name: target[key] for key, name in ESCALATE_FIELDS.items() if target.get(key)})
    elif step == "close_ticket":
        body = {"reason": decision.get("reason", "")[:1000]}
    else:  # pragma: no cover - the plan is fixed
        raise ValueError(f"{step} is not an effect step")
    return {"ticket": ticket["ticket_id"], "body": body}
