"""A rule's conditions: "<field> <op> <value>", parsed once, evaluated by code on the triage and the ticket.

Fields: the triage's `category`, `priority`, `sentiment`, `language`; the
ticket's `ticket.priority`, `ticket.language`, `ticket.subject`,
`ticket.body`, `ticket.customer_email`; and `metadata.<key>`. Operators:
`is`, `is not`, `in` / `not in` (a comma list), `contains` (a substring).
Comparisons ignore case; a metadata key the ticket does not carry is "".
"""

import json
import re
from dataclasses import dataclass

TRIAGE_FIELDS = ("category", "priority", "sentiment", "language")
TICKET_FIELDS = ("priority", "language", "subject", "body", "customer_email", "customer_name", "ticket_id")
OPERATORS = ("is not", "not in", "is", "in", "contains")
_METADATA_KEY = re.compile(r"^metadata\.[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_CONDITION = re.compile(r"^\s*(?P<field>\S+)\s+(?P<op>is\s+not|not\s+in|is|in|contains)\s+(?P<value>.*?)\s*$",
                        re.IGNORECASE)


class ConditionError(ValueError):
    """A condition that cannot be read; the message says why."""


@dataclass(frozen=True)
class Condition:
    field: str
    op: str
    values: tuple[str, ...]

    def holds(self, facts: dict) -> bool:
        actual = str(facts.get(self.field, "") or "").casefold()
        if self.op == "contains":
            return self.values[0] in actual
        matched = actual in self.values
        return not matched if self.op in ("is not", "not in") else matched

    def __str__(self) -> str:
        return f"{self.field} {self.op} {', '.join(self.values)}"


def field_known(name: str) -> bool:
    if name in TRIAGE_FIELDS or _METADATA_KEY.match(name):
        return True
    return name.startswith("ticket.") and name.removeprefix("ticket.") in TICKET_FIELDS


def known_fields() -> str:
    return ", ".join([*TRIAGE_FIELDS, *(f"ticket.{f}" for f in TICKET_FIELDS), "metadata.<key>"])


def condition_parse(text: str) -> Condition:
    """One condition line; ConditionError naming what is wrong."""
    match = _CONDITION.match(text or "")
    if match is None:
        raise ConditionError(f"cannot read {text!r}: write \"<field> <operator> <value>\" with an operator of "
                             f"{', '.join(OPERATORS)} (e.g. \"category is billing\")")
    field, op = match["field"], " ".join(match["op"].lower().split())
    if not field_known(field):
        raise ConditionError(f"unknown field {field!r} (known: {known_fields()})")
    value = match["value"].casefold()
    values = tuple(v.strip() for v in value.split(",")) if op in ("in", "not in") else (value.strip(),)
    if not all(values):
        raise ConditionError(f"{text!r} has no value after {op!r}")
    return Condition(field, op, values)


def facts_of(*, ticket: dict, triage: dict | None) -> dict:
    """What conditions are checked against: the triage's fields, the ticket's, its metadata."""
    facts = {f"ticket.{name}": ticket.get(name, "") for name in TICKET_FIELDS}
    for key, value in (ticket.get("metadata") or {}).items():
        facts[f"metadata.{key}"] = value if isinstance(value, str) else json.dumps(value)
    for name in TRIAGE_FIELDS:
        facts[name] = (triage or {}).get(name, "")
    return facts
