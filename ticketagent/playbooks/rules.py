"""The playbook's rules and reply checks applied by code to a decision: what runs, with which status, where to.

The model chooses actions from the allow-list; the rules decide what runs
(`playbooks.policy`): actions forbidden, required, exactly one of a set, no
reply, the status, the escalation queue, actions held for a person. A
forbidden action wins over a required one; an action held for approval
runs only once a person approved the item.
"""

from ticketagent.plan import REPLY_ACTIONS
from ticketagent.playbooks.checks import reply_check
from ticketagent.playbooks.policy import decision_rules, triage_rules
from ticketagent.playbooks.spec import PlaybookSpec

__all__ = ["decision_review", "rules_apply", "triage_review"]


def rules_apply(spec: PlaybookSpec, *, ticket: dict, triage: dict, chosen: list[str], status: str | None = None,
                ) -> dict:
    """The actions that run (in plan order), those held for approval (action -> why), the status and the
    escalation queue, and one entry per rule that matched: what it changed."""
    return decision_rules(spec, ticket=ticket, triage=triage, chosen=chosen, status=status)


def triage_review(spec: PlaybookSpec, *, ticket: dict, triage: dict) -> dict:
    """The triage step's output: the model's triage with the category and priority the rules decide."""
    return triage_rules(spec, ticket=ticket, triage=triage)


def decision_review(spec: PlaybookSpec, *, ticket: dict, triage: dict, reply: dict, decision: dict) -> dict:
    """The decide step's output: the model's decision as the rules and the reply checks let it run.

    `actions` run (in plan order); `held` (action -> why) wait for a person's
    approval -- an action a rule holds, and the actions that carry the reply
    when a reply check failed; `status` is what `set_status` sets (None when
    it does not run); `chosen` is what the model asked for, `rules` what each
    matching rule changed, `decided_by` which rule decided what, `checks` the
    failed reply checks, and `escalate_to` where the escalation goes (the
    rule's queue, else the category's)."""
    plan = rules_apply(spec, ticket=ticket, triage=triage, chosen=list(decision["actions"]),
                       status=decision.get("status"))
    checks = reply_check(spec, reply=reply, ticket=ticket, triage=triage)
    held = dict(plan["held"])
    if checks and any(action in plan["actions"] for action in REPLY_ACTIONS):
        why = "reply check: " + ", ".join(check["check"] for check in checks)
        held.update({action: why for action in REPLY_ACTIONS if action in plan["actions"] and action not in held})
    status = plan["status"] if "set_status" in plan["actions"] else None
    out = {"actions": plan["actions"], "status": status, "reason": decision.get("reason", ""),
           "chosen": list(decision["actions"]), "rules": plan["rules"], "checks": checks, "held": held}
    if decision.get("status") != status and "status" in plan["decided_by"]:
        out["chosen_status"] = decision.get("status")
    if plan["decided_by"]:
        out["decided_by"] = plan["decided_by"]
    category = spec.category(triage.get("category", ""))
    target = plan["escalate_to"] or (
        {key: value for key, value in category.escalate_to.model_dump().items() if value} if category else {})
    if target and "escalate" in plan["actions"]:
        out["escalate_to"] = target
    return out
