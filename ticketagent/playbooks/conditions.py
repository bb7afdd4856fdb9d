"""A rule's conditions: "<field> <op> <value>", parsed once, evaluated by code on the ticket, facts, decision.

Fields: the triage's `category`, `priority`, `sentiment`, `language`; the
ticket's `ticket.priority`, `ticket.language`, `ticket.subject`,
`ticket.body`, `ticket.text` (subject and body), `ticket.customer_email`;
`metadata.<key>`; a fact the playbook declares, by its name; and what is
decided so far: `decided` (the actions), `status` and `escalation` (the
queue a rule named, "" before).

Operators:
- `is`, `is not`, `in` / `not in` (a comma list), `contains`, `starts with`,
  `ends with`: text, ignoring case and accents;
- `mentions <list>[, <list>]`: any phrase of the playbook's word lists, on
  word boundaries, in any of their languages (`playbooks.words`);
- `>`, `>=`, `<`, `<=`, `=`, `!=`: a number (`months_since_delivery > 24`),
  money with its currency (`order_total > 400 EUR`: an amount in another
  currency never compares), a date (`delivered < 2025-06-01`);
- `is missing`, `is given`: whether the ticket carries a value at all;
- `has`, `lacks`: an action in `decided` (`decided has escalate`);
- `always`: the one line that holds for every ticket.

A value that is missing or cannot be read as the comparison's type makes a
comparison false (and `is missing` true): a rule never acts on a guess.
"""

import json
import re
from dataclasses import dataclass
from datetime import date
from decimal import Decimal, InvalidOperation

from ticketagent.playbooks.words import phrase_first, plain

TRIAGE_FIELDS = ("category", "priority", "sentiment", "language")
TICKET_FIELDS = ("priority", "language", "subject", "body", "customer_email", "customer_name", "ticket_id", "text")
DECISION_FIELDS = ("decided", "status", "escalation")
TEXT_OPS = ("is not", "not in", "is", "in", "contains", "starts with", "ends with")
COMPARE_OPS = (">=", "<=", "!=", ">", "<", "=")
OPERATORS = (*TEXT_OPS, "mentions", *COMPARE_OPS, "is missing", "is given", "has", "lacks")
_METADATA_KEY = re.compile(r"^metadata\.[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
FACT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_CONDITION = re.compile(
    r"^\s*(?P<field>\S+)\s+(?P<op>is\s+missing|is\s+given|is\s+not|not\s+in|starts\s+with|ends\s+with|is|in|contains"
    r"|mentions|has|lacks|>=|<=|!=|>|<|=)(?:\s+(?P<value>.*?))?\s*$", re.IGNORECASE)
_MONEY = re.compile(r"^(?P<amount>-?\d+(?:\.\d+)?)\s*(?P<currency>[A-Za-z]{3})?$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
ACTIONS = ("save_draft", "notify_customer", "set_status", "close_ticket", "escalate")


class ConditionError(ValueError):
    """A condition that cannot be read; the message says why."""


@dataclass(frozen=True)
class Money:
    amount: Decimal
    currency: str  # upper case; "" when unknown

    def __str__(self) -> str:
        return f"{self.amount} {self.currency}".strip()


@dataclass(frozen=True)
class Condition:
    field: str
    op: str
    values: tuple[str, ...]

    def holds(self, facts: dict, words: dict | None = None) -> bool:
        if self.op == "always":
            return True
        actual = facts.get(self.field)
        if self.op in ("is missing", "is given"):
            missing = actual is None or actual == "" or actual == []
            return missing if self.op == "is missing" else not missing
        if self.op in ("has", "lacks"):
            present = self.values[0] in (actual or ())
            return present if self.op == "has" else not present
        if self.op in COMPARE_OPS:
            return _compare(actual, self.op, self.values[0])
        if self.op == "mentions":
            phrases = [p for name in self.values for ps in (words or {}).get(name, {}).values() for p in ps]
            return phrase_first(_text(actual), phrases) is not None
        text = plain(_text(actual))
        if self.op == "contains":
            return self.values[0] in text
        if self.op == "starts with":
            return text.startswith(self.values[0])
        if self.op == "ends with":
            return text.endswith(self.values[0])
        matched = text in self.values
        return not matched if self.op in ("is not", "not in") else matched

    def __str__(self) -> str:
        if self.op == "always":
            return "always"
        return " ".join(part for part in (self.field, self.op, ", ".join(self.values)) if part)


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Money):
        return str(value)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _compare(actual, op: str, wanted: str) -> bool:
    if actual is None or actual == "":
        return False
    if _DATE.match(wanted):
        left, right = date_of(actual), date_of(wanted)
    else:
        match = _MONEY.match(wanted)
        right = Decimal(match["amount"])
        currency = (match["currency"] or "").upper()
        if currency:
            if not isinstance(actual, Money) or actual.currency != currency:
                return False
            left = actual.amount
        else:
            left = actual.amount if isinstance(actual, Money) else number_of(actual)
    if left is None or right is None:
        return False
    return {">": left > right, ">=": left >= right, "<": left < right, "<=": left <= right,
            "=": left == right, "!=": left != right}[op]


def number_of(value) -> Decimal | None:
    """`value` as a number (a JSON number, or text such as "2349.00" or "2,349.00"), else None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return Decimal(str(value).replace(",", "").strip())
    except InvalidOperation:
        return None


def date_of(value) -> date | None:
    try:
        return date.fromisoformat(str(value).strip()[:10])
    except ValueError:
        return None


def field_known(name: str, facts: frozenset[str] | None = None) -> bool:
    if name in TRIAGE_FIELDS or name in DECISION_FIELDS or _METADATA_KEY.match(name):
        return True
    if name.startswith("ticket."):
        return name.removeprefix("ticket.") in TICKET_FIELDS
    return facts is None and bool(FACT_NAME.match(name)) or name in (facts or ())


def known_fields() -> str:
    return ", ".join([*TRIAGE_FIELDS, *(f"ticket.{f}" for f in TICKET_FIELDS), "metadata.<key>", *DECISION_FIELDS,
                      "or a fact the playbook declares"])


def condition_parse(text: str, *, facts: frozenset[str] | None = None) -> Condition:
    """One condition line; ConditionError naming what is wrong. With `facts` (the names the playbook
    declares), a bare name must be one of them."""
    if (text or "").strip().casefold() == "always":
        return Condition("", "always", ())
    match = _CONDITION.match(text or "")
    if match is None:
        raise ConditionError(f"cannot read {text!r}: write \"<field> <operator> <value>\" with an operator of "
                             f"{', '.join(OPERATORS)} (e.g. \"category is billing\"), or \"always\"")
    field, op = match["field"], " ".join(match["op"].lower().split())
    if not field_known(field, facts) or (field == "decided") != (op in ("has", "lacks")):
        if field == "decided" or op in ("has", "lacks"):
            raise ConditionError(f"{text!r}: write \"decided has <action>\" or \"decided lacks <action>\"")
        raise ConditionError(f"unknown field {field!r} (known: {known_fields()})")
    return Condition(field, op, _values(text, op, (match["value"] or "").strip()))


def _values(text: str, op: str, raw: str) -> tuple[str, ...]:
    """The values of a condition line whose operator is `op`; ConditionError naming what is wrong."""
    if op in ("is missing", "is given"):
        if raw:
            raise ConditionError(f"{text!r}: nothing follows {op!r}")
        return ()
    if not raw:
        raise ConditionError(f"{text!r} has no value after {op!r}")
    if op in COMPARE_OPS:
        if not (_DATE.match(raw) and date_of(raw)) and not _MONEY.match(raw):
            raise ConditionError(f"{text!r}: {op!r} compares with a number (24), money with its currency "
                                 "(400 EUR) or a date (2025-06-01)")
        return (raw,)
    if op in ("has", "lacks"):
        if raw not in ACTIONS:
            raise ConditionError(f"{text!r}: {raw!r} is not an action ({', '.join(ACTIONS)})")
        return (raw,)
    if op in ("in", "not in", "mentions"):
        values = tuple(plain(v) if op != "mentions" else v.strip() for v in raw.split(","))
    else:
        values = (plain(raw),)
    if not all(values):
        raise ConditionError(f"{text!r} has an empty value after {op!r}")
    return values


def facts_of(*, ticket: dict, triage: dict | None) -> dict:
    """What conditions are checked against: the triage's fields, the ticket's, its metadata (the declared
    facts and the decision are added by `playbooks.policy`)."""
    facts = {f"ticket.{name}": ticket.get(name, "") for name in TICKET_FIELDS if name != "text"}
    facts["ticket.text"] = f"{ticket.get('subject', '')}\n{ticket.get('body', '')}"
    for key, value in (ticket.get("metadata") or {}).items():
        facts[f"metadata.{key}"] = value
    for name in TRIAGE_FIELDS:
        facts[name] = (triage or {}).get(name, "")
    return facts
