"""A playbook read the way a person reads it: each rule as one sentence of what it tests and everything it
decides, each fact with where its value comes from (the version page, `templates/playbooks/version.html`)."""

from ticketagent.playbooks.spec import FactSpec, RuleSpec


def _listed(values, joiner: str = ", ") -> str:
    return joiner.join(str(v) for v in values)


def rule_conditions(rule: RuleSpec) -> str:
    """"always", or its conditions: all of `when`, then "any of (…)" and "none of (…)"."""
    if [line.lower() for line in rule.when] == ["always"] and not rule.any_of and not rule.none_of:
        return "always"
    parts = [" and ".join(line for line in rule.when if line.lower() != "always")]
    if rule.any_of:
        parts.append(f"any of ({_listed(rule.any_of, '; ')})")
    if rule.none_of:
        parts.append(f"none of ({_listed(rule.none_of, '; ')})")
    return " and ".join(part for part in parts if part)


def rule_outputs(rule: RuleSpec) -> list[str]:
    """Everything the rule decides, in the order the rules are applied (triage, then the decision)."""
    to = rule.escalate_to
    where = [f"{label} {value}" for label, value in (("RT queue", to.rt_queue), ("RT owner", to.rt_owner),
                                                     ("Zendesk group", to.zendesk_group)) if value] if to else []
    held = f"hold {_listed(rule.approve)} for approval" + (f" ({rule.hold_reason})" if rule.hold_reason else "")
    said = [
        (rule.category, f"category {rule.category}"),
        (rule.priority, f"priority {rule.priority}"),
        (rule.priority_at_least, f"priority at least {rule.priority_at_least}"),
        (rule.priority_at_most, f"priority at most {rule.priority_at_most}"),
        (rule.no_reply, "no reply"),
        (rule.forbid, f"forbid {_listed(rule.forbid)}"),
        (rule.require, f"require {_listed(rule.require)}"),
        (rule.exactly_one_of, f"exactly one of {_listed(rule.exactly_one_of, ' or ')}"),
        (rule.approve, held),
        (rule.status, f"status {rule.status}"),
        (rule.status_allowed, f"status only {_listed(rule.status_allowed, ' or ')}"),
        (rule.status_forbidden, f"status never {_listed(rule.status_forbidden, ' or ')}"),
        (where, f"escalate to {_listed(where)}"),
    ]
    return [words for given, words in said if given]


def fact_source(fact: FactSpec) -> str:
    """Where a fact's value comes from, in words."""
    kind, _, name = fact.source.partition(".")
    return {"extract": "the model reads it from the message", "metadata": f"the ticket's field {name}",
            "ticket": f"the ticket's {name.replace('_', ' ')}", "triage": f"the triage's {name}"}[kind]


def fact_type(fact: FactSpec) -> str:
    """A fact's type in words: "money (EUR)", "one of care, regular", "yes or no"."""
    if fact.type == "one_of":
        return f"one of {_listed(fact.options)}"
    if fact.type == "money":
        currency = fact.currency.removeprefix("metadata.")
        return f"money ({'in the field ' + currency if fact.currency.startswith('metadata.') else currency})" \
            if currency else "money"
    return {"yes_no": "yes or no"}.get(fact.type, fact.type)
