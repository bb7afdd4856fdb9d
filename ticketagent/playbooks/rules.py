"""The playbook's rules applied by code to a decision: actions forbidden, required, or held for a person.

The model chooses actions from the allow-list; the rules decide what runs.
Nothing a ticket says reaches this code except as a fact a condition
compares (its fields and metadata): rules are data, checked here, never by
the model. A forbidden action wins over a required one; an action held
for approval runs only once a person approved the item.
"""

from ticketagent.plan import EFFECT_STEPS, REPLY_ACTIONS
from ticketagent.playbooks.checks import reply_check
from ticketagent.playbooks.conditions import facts_of
from ticketagent.playbooks.spec import PlaybookSpec


def rules_apply(spec: PlaybookSpec, *, ticket: dict, triage: dict, chosen: list[str]) -> dict:
    """The actions that run (in plan order), those held for approval (action -> why), and one
    entry per rule that matched: what it changed."""
    facts = facts_of(ticket=ticket, triage=triage)
    matched = [rule for rule in spec.rules if all(c.holds(facts) for c in rule.conditions())]
    wanted = set(chosen).union(*(rule.require for rule in matched))
    forbidden = set().union(*(rule.forbid for rule in matched))
    actions = wanted - forbidden
    held: dict[str, str] = {}
    applied = []
    for rule in matched:
        entry = {"rule": rule.name,
                 "forbade": [a for a in rule.forbid if a in wanted],
                 "required": [a for a in rule.require if a not in chosen and a in actions],
                 "held": [a for a in rule.approve if a in actions]}
        for action in entry["held"]:
            held.setdefault(action, f"rule \u201c{rule.name}\u201d")
        applied.append({key: value for key, value in entry.items() if value or key == "rule"})
    return {"actions": [a for a in EFFECT_STEPS if a in actions], "held": held, "rules": applied}


def decision_review(spec: PlaybookSpec, *, ticket: dict, triage: dict, reply: dict, decision: dict) -> dict:
    """The decide step's output: the model's decision as the rules and the reply checks let it run.

    `actions` run (in plan order); `held` (action -> why) wait for a person's
    approval -- an action a rule holds, and the actions that carry the reply
    when a reply check failed; `chosen` is what the model asked for, `rules`
    what each matching rule changed, `checks` the failed reply checks, and
    `escalate_to` where the category's escalation goes."""
    plan = rules_apply(spec, ticket=ticket, triage=triage, chosen=list(decision["actions"]))
    checks = reply_check(spec, reply=reply, ticket=ticket, triage=triage)
    held = dict(plan["held"])
    if checks:
        why = "reply check: " + ", ".join(check["check"] for check in checks)
        held.update({action: why for action in REPLY_ACTIONS if action in plan["actions"] and action not in held})
    out = {"actions": plan["actions"], "status": decision.get("status"), "reason": decision.get("reason", ""),
           "chosen": list(decision["actions"]), "rules": plan["rules"], "checks": checks, "held": held}
    category = spec.category(triage.get("category", ""))
    target = {key: value for key, value in category.escalate_to.model_dump().items() if value} if category else {}
    if target and "escalate" in plan["actions"]:
        out["escalate_to"] = target
    return out
