"""The playbook's rules applied by code: what the model proposed, as the rules decide it.

Rules are read in their order, each against the facts as they stand when
it is reached: the ticket, its metadata, the declared facts, the triage
and -- at the decision -- what is decided so far (`decided`, `status`,
`escalation`). Two moments:

- at triage (`triage_rules`), before the reply is drafted: the category
  (the first rule that sets it wins; later rules see it) and the priority
  (the first rule that sets it wins over the model and the ticket; then
  every matching bound, `priority_at_least` / `priority_at_most`);
- at the decision (`decision_rules`): actions forbidden (a forbidden action
  wins over a required one, whichever rule comes first), required,
  `exactly_one_of` a set (the first of the set that is wanted stays, else
  the first not forbidden is added), `no_reply` (no draft saved, nothing
  sent), the status (the first rule that sets it wins over the model's;
  `status_allowed` / `status_forbidden` replace any other by the first
  allowed one, else `pending`), the escalation queue (the first rule naming
  one wins over the category's), actions held for approval with a reason.

Every change names the rule that made it (`decided_by`, and one entry per
matching rule in `rules`); nothing a ticket says reaches this code except
as a fact a condition compares.
"""

from dataclasses import dataclass, field

from ticketagent.plan import EFFECT_STEPS
from ticketagent.playbooks.conditions import facts_of
from ticketagent.playbooks.facts import fact_value
from ticketagent.playbooks.spec import PlaybookSpec

PRIORITIES = ("low", "normal", "high", "urgent")
REPLY = ("save_draft", "notify_customer")


def facts_for(spec: PlaybookSpec, *, ticket: dict, triage: dict | None, decided: dict | None = None) -> dict:
    """What a rule's conditions read: the ticket, its metadata, the triage, the playbook's declared facts,
    and (at the decision) what is decided so far."""
    facts = facts_of(ticket=ticket, triage=triage)
    for fact in spec.facts:
        facts[fact.name] = fact_value(fact, ticket=ticket, triage=triage)
    if decided is not None:
        facts["decided"] = list(decided["actions"])
        facts["status"] = decided.get("status") or ""
        facts["escalation"] = " ".join((decided.get("escalate_to") or {}).values())
    return facts


def triage_rules(spec: PlaybookSpec, *, ticket: dict, triage: dict) -> dict:
    """The triage as the rules decide it: category and priority, with `decided_by` (field -> rule), the
    model's own values (`model`) when a rule changed them, and one entry per matching rule (`rules`)."""
    out = dict(triage)
    decided_by: dict[str, str] = {}
    applied, bounds = [], []
    for rule in spec.rules:
        if not rule.triage_outputs() or not rule.holds(facts_for(spec, ticket=ticket, triage=out), spec.words):
            continue
        did = []
        if rule.category and "category" not in decided_by:
            out["category"], decided_by["category"] = rule.category, rule.name
            did.append(f"category {rule.category}")
        if rule.priority and "priority" not in decided_by:
            out["priority"], decided_by["priority"] = rule.priority, rule.name
            did.append(f"priority {rule.priority}")
        if rule.priority_at_least or rule.priority_at_most:
            bounds.append((rule, did))
        applied.append({"rule": rule.name, "did": did})
    for rule, did in bounds:
        rank = PRIORITIES.index(out["priority"]) if out.get("priority") in PRIORITIES else 1
        if rule.priority_at_least and rank < PRIORITIES.index(rule.priority_at_least):
            out["priority"], decided_by["priority"] = rule.priority_at_least, rule.name
            did.append(f"priority raised to {rule.priority_at_least}")
        elif rule.priority_at_most and rank > PRIORITIES.index(rule.priority_at_most):
            out["priority"], decided_by["priority"] = rule.priority_at_most, rule.name
            did.append(f"priority lowered to {rule.priority_at_most}")
    if applied:
        out["rules"] = applied
        out["decided_by"] = decided_by
        changed = {name: triage.get(name) for name in ("category", "priority") if triage.get(name) != out.get(name)}
        if changed:
            out["model"] = changed
    return out


def decision_rules(spec: PlaybookSpec, *, ticket: dict, triage: dict, chosen: list[str], status: str | None,
                   ) -> dict:
    """The actions that run (plan order), the status, the escalation queue and the held actions as the
    rules decide them; `decided_by` (what -> rule) and one entry per matching rule (`rules`)."""
    made = _Decided(actions=[a for a in EFFECT_STEPS if a in chosen],
                    state={"status": status, "escalate_to": {}})
    for rule in spec.rules:
        if not rule.decision_outputs():
            continue
        made.state["actions"] = made.actions
        if not rule.holds(facts_for(spec, ticket=ticket, triage=triage, decided=made.state), spec.words):
            continue
        made.apply(rule)
    return made.answer()


@dataclass
class _Decided:
    """What the rules have decided so far, rule by rule (`decision_rules`)."""

    actions: list[str]
    state: dict
    forbidden: set[str] = field(default_factory=set)
    held: dict[str, str] = field(default_factory=dict)
    decided_by: dict[str, str] = field(default_factory=dict)
    applied: list[dict] = field(default_factory=list)

    def apply(self, rule) -> None:
        entry = {"rule": rule.name, "forbade": [], "required": [], "held": [], "did": []}
        self._forbid(rule, entry)
        for action in rule.require:
            if action not in self.actions and action not in self.forbidden:
                self._add(action, rule, entry)
        if rule.exactly_one_of:
            self._exactly_one(rule, entry)
        if rule.no_reply:
            entry["did"].append("no reply")
        _status(rule, self.state, self.decided_by, entry)
        if rule.escalate_to and "escalate_to" not in self.decided_by:
            self.state["escalate_to"] = {k: v for k, v in rule.escalate_to.model_dump().items() if v}
            self.decided_by["escalate_to"] = rule.name
            entry["did"].append("escalation to " + ", ".join(self.state["escalate_to"].values()))
        for action in rule.approve:
            self.held.setdefault(action, f"rule \u201c{rule.name}\u201d"
                                 + (f": {rule.hold_reason}" if rule.hold_reason else ""))
            entry["held"].append(action)
        self.actions.sort(key=EFFECT_STEPS.index)
        self.applied.append({key: value for key, value in entry.items() if value or key == "rule"})

    def _forbid(self, rule, entry: dict) -> None:
        no = set(rule.forbid) | (set(REPLY) if rule.no_reply else set())
        self.forbidden |= no
        for action in [a for a in self.actions if a in no]:
            self._remove(action, rule, entry)

    def _exactly_one(self, rule, entry: dict) -> None:
        present = [a for a in rule.exactly_one_of if a in self.actions]
        for action in present[1:]:
            self._remove(action, rule, entry)
        if not present:
            add = next((a for a in rule.exactly_one_of if a not in self.forbidden), None)
            if add:
                self._add(add, rule, entry)

    def _add(self, action: str, rule, entry: dict) -> None:
        self.actions.append(action)
        entry["required"].append(action)
        self.decided_by[action] = rule.name

    def _remove(self, action: str, rule, entry: dict) -> None:
        self.actions.remove(action)
        entry["forbade"].append(action)
        self.decided_by[action] = rule.name

    def answer(self) -> dict:
        held = {action: why for action, why in self.held.items() if action in self.actions}
        for entry in self.applied:
            if "held" in entry:
                entry["held"] = [a for a in entry["held"] if a in self.actions]
                if not entry["held"]:
                    del entry["held"]
        return {"actions": self.actions, "status": self.state["status"], "escalate_to": self.state["escalate_to"],
                "held": held, "rules": self.applied, "decided_by": self.decided_by}


def _status(rule, state: dict, decided_by: dict, entry: dict) -> None:
    if rule.status and "status" not in decided_by:
        state["status"], decided_by["status"] = rule.status, rule.name
        entry["did"].append(f"status {rule.status}")
    current = state["status"] or "pending"
    allowed = [s for s in rule.status_allowed if s not in rule.status_forbidden]
    if rule.status_allowed and current not in allowed or current in rule.status_forbidden:
        instead = allowed[0] if allowed else "pending"
        state["status"], decided_by["status"] = instead, rule.name
        entry["did"].append(f"status {current} not allowed: {instead}")
