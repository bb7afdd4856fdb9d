"""What a playbook holds, validated: guidance, categories, rules, reply settings, reply checks, articles.

One `PlaybookSpec` is one version's whole content. Every error names its
field (`rules[2].when[0]: unknown field 'plan'`), so an editor form, an
imported file and the API report the same words; nothing is saved from a
spec that does not validate.
"""

import copy
import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ticketagent.playbooks.conditions import (
    DECISION_FIELDS,
    FACT_NAME,
    TICKET_FIELDS,
    TRIAGE_FIELDS,
    Condition,
    ConditionError,
    condition_parse,
)
from ticketagent.playbooks.contacts import contacts_found
from ticketagent.vocabulary import Action, HelpdeskStatus, Priority

FORMAT = 3  # the layout of a spec this code writes; a version written in another it cannot read is not run
# Format 1 (before the promise, secret, personal-data, contact allow-list and article-title checks) is read with
# those checks at the standard playbook's settings: an old version or file loads, and holds more. Formats 1 and
# 2 (before facts, word lists and rules that set the category, priority, status and escalation queue) are read
# as format 3 with no facts, no word lists, and their rules as they were.
SUPPORTED_FORMATS = frozenset({1, 2, 3})
STANDARD_FILE = Path(__file__).with_name("standard.yaml")
ARTICLE_MAX_CHARS = 5000
GUIDANCE_SECTIONS = ("tone", "policies", "escalation", "other")
PLACEHOLDER_FIELDS = ("ticket_id", "customer_name", "customer_email", "subject", "priority", "language")
_PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_METADATA_KEY = re.compile(r"^metadata\.[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


class PlaybookInvalid(ValueError):
    """A playbook that does not validate: `errors` lists "field: what is wrong", each once."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


def placeholders_unknown(text: str) -> list[str]:
    """The placeholders in `text` that name no ticket field nor a metadata key."""
    return [name for name in _PLACEHOLDER.findall(text or "")
            if name not in PLACEHOLDER_FIELDS and not _METADATA_KEY.match(name)]


def placeholders_fill(text: str, ticket: dict) -> str:
    """`text` with each placeholder replaced by the ticket's value ("(not given)" when it has none)."""
    def value(match: re.Match) -> str:
        name = match.group(1)
        if name.startswith("metadata."):
            found = (ticket.get("metadata") or {}).get(name.removeprefix("metadata."))
            found = found if isinstance(found, str) or found is None else json.dumps(found)
        else:
            found = ticket.get(name)
        return str(found) if found not in (None, "") else "(not given)"

    return _PLACEHOLDER.sub(value, text or "")


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


def _placeholders_known(text: str) -> str:
    unknown = placeholders_unknown(text)
    if unknown:
        raise ValueError(f"unknown placeholder {{{{{unknown[0]}}}}} (known: "
                         + ", ".join(f"{{{{{f}}}}}" for f in PLACEHOLDER_FIELDS) + ", {{metadata.<key>}})")
    return text


class Guidance(Spec):
    tone: str = Field(default="", max_length=4000)
    policies: str = Field(default="", max_length=4000)
    escalation: str = Field(default="", max_length=4000)
    other: str = Field(default="", max_length=4000)

    _known = field_validator(*GUIDANCE_SECTIONS)(_placeholders_known)


class EscalateTo(Spec):
    rt_queue: str = Field(default="", max_length=200)
    rt_owner: str = Field(default="", max_length=200)
    zendesk_group: str = Field(default="", max_length=200)


class CategorySpec(Spec):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,39}$")
    description: str = Field(default="", max_length=1000)
    priority: Priority = "normal"
    keywords: list[str] = Field(default_factory=list, max_length=100)
    escalate_to: EscalateTo = Field(default_factory=EscalateTo)

    @field_validator("keywords")
    @classmethod
    def _keywords(cls, words: list[str]) -> list[str]:
        out = [" ".join(w.split()).casefold() for w in words]
        if any(not w or len(w) > 60 for w in out):
            raise ValueError("a keyword is 1 to 60 characters")
        return out


def _phrase_lists(lists: dict[str, list[str]]) -> dict[str, list[str]]:
    out = {}
    for code, phrases in lists.items():
        if not re.fullmatch(r"[a-z]{2,3}|any", code):
            raise ValueError(f"{code!r} is not a language code (en, de, zh) nor 'any'")
        cleaned = [" ".join(p.split()).casefold() for p in phrases]
        bad = next((p for p in cleaned if not p or len(p) > 80 or "," in p), None)
        if bad is not None:
            raise ValueError(f"{code}: a phrase is 1 to 80 characters without a comma ({bad!r})")
        out[code] = list(dict.fromkeys(cleaned))
    return out


PhraseLists = Annotated[dict[str, Annotated[list[str], Field(max_length=200)]],
                        Field(max_length=20), AfterValidator(_phrase_lists)]


FactType = Literal["text", "number", "money", "date", "yes_no", "one_of"]
_SOURCE = re.compile(r"^(extract|metadata\.[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}|ticket\.[a-z_]+|triage\.[a-z_]+)$")


class FactSpec(Spec):
    """A fact a rule may test: read from the ticket (a field, a metadata key, an upload column), from the
    triage, or extracted from the message by the model during triage (`source: extract`)."""

    name: str = Field(pattern=FACT_NAME.pattern)
    description: str = Field(default="", max_length=500)
    type: FactType = "text"
    source: str = Field(default="extract", max_length=80)
    currency: str = Field(default="", max_length=80)  # money: a field holding the code (metadata.currency) or a code
    options: list[str] = Field(default_factory=list, max_length=30)  # one_of
    default: str | float | bool | None = None  # the value when the ticket carries none
    cues: PhraseLists = Field(default_factory=dict)  # extract: what the offline model looks for

    @field_validator("source")
    @classmethod
    def _source(cls, source: str) -> str:
        if not _SOURCE.match(source):
            raise ValueError(f"{source!r} is not a source: write extract, metadata.<key>, ticket.<field> or "
                             "triage.<field>")
        kind, _, name = source.partition(".")
        if kind == "ticket" and name not in TICKET_FIELDS or kind == "triage" and name not in TRIAGE_FIELDS:
            raise ValueError(f"unknown {kind} field {name!r} (known: "
                             f"{', '.join(TICKET_FIELDS if kind == 'ticket' else TRIAGE_FIELDS)})")
        return source

    @field_validator("currency")
    @classmethod
    def _currency(cls, currency: str) -> str:
        if currency and not re.fullmatch(r"[A-Z]{3}|metadata\.[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", currency):
            raise ValueError(f"{currency!r} is neither a currency code (EUR) nor metadata.<key>")
        return currency

    @model_validator(mode="after")
    def _typed(self):
        if self.type == "one_of" and not self.options:
            raise ValueError(f"fact {self.name!r} is one_of: list its options")
        if self.type != "one_of" and self.options:
            raise ValueError(f"fact {self.name!r}: options are for a one_of fact")
        if self.currency and self.type != "money":
            raise ValueError(f"fact {self.name!r}: a currency is for a money fact")
        if self.name in DECISION_FIELDS or self.name in TRIAGE_FIELDS:
            raise ValueError(f"fact {self.name!r}: the name is a built-in field's")
        return self


def _condition_line(line: str) -> str:
    try:
        condition_parse(line)
    except ConditionError as exc:
        raise ValueError(str(exc)) from None
    return " ".join(line.split())


ConditionLines = list[Annotated[str, AfterValidator(_condition_line)]]
TRIAGE_OUTPUTS = ("category", "priority", "priority_at_least", "priority_at_most")
DECISION_OUTPUTS = ("forbid", "require", "approve", "exactly_one_of", "no_reply", "status", "status_allowed",
                    "status_forbidden", "escalate_to")


class RuleSpec(Spec):
    """When its conditions hold (all of `when`, one of `any_of` when given, none of `none_of`), what a rule
    decides: the category and priority (at triage, before the reply is drafted), and the actions, the
    status and the escalation queue (at the decision)."""

    name: str = Field(min_length=1, max_length=120)
    when: ConditionLines = Field(default_factory=list, max_length=10)
    any_of: ConditionLines = Field(default_factory=list, max_length=30)
    none_of: ConditionLines = Field(default_factory=list, max_length=30)
    category: str | None = None
    priority: Priority | None = None
    priority_at_least: Priority | None = None
    priority_at_most: Priority | None = None
    forbid: list[Action] = Field(default_factory=list)
    require: list[Action] = Field(default_factory=list)
    approve: list[Action] = Field(default_factory=list)
    hold_reason: str = Field(default="", max_length=300)
    exactly_one_of: list[Action] = Field(default_factory=list)
    no_reply: bool = False
    status: HelpdeskStatus | None = None
    status_allowed: list[HelpdeskStatus] = Field(default_factory=list)
    status_forbidden: list[HelpdeskStatus] = Field(default_factory=list)
    escalate_to: EscalateTo | None = None

    @model_validator(mode="after")
    def _does_something(self):
        if not (self.when or self.any_of or self.none_of):
            raise ValueError("a rule has at least one condition (when, any_of, none_of; \"always\" for every "
                             "ticket)")
        if not any(getattr(self, name) for name in (*TRIAGE_OUTPUTS, *DECISION_OUTPUTS)):
            raise ValueError("a rule forbids, requires or holds for approval at least one action, or sets the "
                             "category, the priority or the status, says no reply or names an escalation queue")
        if len(self.exactly_one_of) == 1:
            raise ValueError("exactly_one_of names two actions or more")
        if self.triage_outputs() and any(c.field in DECISION_FIELDS for c in self.conditions()):
            raise ValueError("a rule that sets the category or the priority is applied at triage, before any "
                             "action or status is decided: it cannot test decided or status")
        if self.status and self.status_allowed and self.status not in self.status_allowed:
            raise ValueError(f"status {self.status!r} is not among status_allowed")
        return self

    def conditions(self) -> list[Condition]:
        return [condition_parse(line) for line in (*self.when, *self.any_of, *self.none_of)]

    def holds(self, facts: dict, words: dict) -> bool:
        def each(lines):
            return [condition_parse(line).holds(facts, words) for line in lines]
        return (all(each(self.when)) and (not self.any_of or any(each(self.any_of)))
                and not any(each(self.none_of)))

    def triage_outputs(self) -> bool:
        return any(getattr(self, name) for name in TRIAGE_OUTPUTS)

    def decision_outputs(self) -> bool:
        return any(getattr(self, name) for name in DECISION_OUTPUTS)


class ReplySettings(Spec):
    signature: str = Field(default="", max_length=500)
    language: str = Field(default="ticket", pattern=r"^(ticket|[a-z]{2,3}(-[A-Za-z]{2,4})?)$")
    max_chars: int = Field(default=2000, ge=100, le=10000)

    _known = field_validator("signature")(_placeholders_known)


def _standard_checks(name: str):
    """The standard playbook's setting `name` of its checks: the default of a file or version without it."""
    def default():
        return copy.deepcopy(_standard_check_settings()[name])  # a fresh list each time: the cache stays as read
    return default


@functools.cache
def _standard_check_settings() -> dict:
    return yaml.safe_load(STANDARD_FILE.read_text(encoding="utf-8"))["checks"]



class ReplyChecks(Spec):
    min_chars: int = Field(default=40, ge=0, le=2000)
    scaffolding: bool = True
    made_up_contacts: bool = True
    contacts_allowed: list[str] = Field(default_factory=list, max_length=100)
    language: bool = True
    promises: bool = True
    promise_phrases: PhraseLists = Field(default_factory=_standard_checks("promise_phrases"))
    money: bool = True
    secrets: bool = True
    internal_fields: list[str] = Field(default_factory=_standard_checks("internal_fields"), max_length=20)
    personal_data: bool = True
    article_titles: bool = True
    article_cues: PhraseLists = Field(default_factory=_standard_checks("article_cues"))

    @field_validator("contacts_allowed")
    @classmethod
    def _contacts(cls, entries: list[str]) -> list[str]:
        out = [" ".join(e.split()) for e in entries]
        for entry in out:
            if not any(contacts_found(entry).values()):
                raise ValueError(f"{entry!r} is not a phone number, a link or an email address")
        return out

    @field_validator("internal_fields")
    @classmethod
    def _fields(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", name):
                raise ValueError(f"{name!r} is not a metadata field name")
        return names


class ArticleSpec(Spec):
    title: str = Field(min_length=1, max_length=200)
    body: str = Field(min_length=1, max_length=ARTICLE_MAX_CHARS)
    tags: list[str] = Field(default_factory=list, max_length=20)
    enabled: bool = True

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: list[str]) -> list[str]:
        out = [t.strip().casefold() for t in tags]
        if any(not t or len(t) > 40 for t in out):
            raise ValueError("a tag is 1 to 40 characters")
        return out


class PlaybookSpec(Spec):
    format: Literal[1, 2, 3] = FORMAT
    name: str = Field(min_length=1, max_length=100)
    guidance: Guidance = Field(default_factory=Guidance)
    categories: list[CategorySpec] = Field(min_length=1, max_length=50)
    facts: list[FactSpec] = Field(default_factory=list, max_length=50)
    words: dict[Annotated[str, Field(pattern=FACT_NAME.pattern)], PhraseLists] = Field(default_factory=dict,
                                                                                       max_length=50)
    rules: list[RuleSpec] = Field(default_factory=list, max_length=100)
    reply: ReplySettings = Field(default_factory=ReplySettings)
    checks: ReplyChecks = Field(default_factory=ReplyChecks)
    articles: list[ArticleSpec] = Field(default_factory=list, max_length=500)

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data):
        """Formats 1 and 2 are read as format 3: what they did not have takes its default."""
        if isinstance(data, dict) and data.get("format", FORMAT) in (1, 2):
            data = {**data, "format": FORMAT}
        return data

    @model_validator(mode="after")
    def _consistent(self):
        errors = consistency_errors(self.model_dump(mode="json"))
        if errors:
            raise ValueError("\n".join(errors))
        return self

    def category(self, name: str) -> CategorySpec | None:
        return next((c for c in self.categories if c.name == name), None)

    def fact(self, name: str) -> FactSpec | None:
        return next((f for f in self.facts if f.name == name), None)

    def extracted_facts(self) -> tuple[tuple[str, str, tuple[str, ...], str], ...]:
        """The facts the model fills in triage, as `llm.schemas.triage_schema` takes them."""
        return tuple((f.name, f.type, tuple(f.options), f.description) for f in self.facts if f.source == "extract")

    def content_hash(self) -> str:
        return hashlib.sha256(canonical(self).encode()).hexdigest()


def _listed(data: dict, section: str) -> list[dict]:
    return [entry for entry in data.get(section) or [] if isinstance(entry, dict)] \
        if isinstance(data.get(section), list) else []


def consistency_errors(data: dict) -> list[str]:
    """What no single field shows: duplicate category, fact or rule names; a rule naming a category, a
    fact or a word list that does not exist. Read from the raw mapping, so they are reported beside the
    fields' own errors."""
    categories, rules, facts = _listed(data, "categories"), _listed(data, "rules"), _listed(data, "facts")
    errors = _duplicates("categories", "category", [str(c.get("name", "")) for c in categories])
    errors += _duplicates("facts", "fact", [str(f.get("name", "")) for f in facts])
    errors += _duplicates("rules", "rule", [str(r.get("name", "")) for r in rules])
    names = {str(c.get("name", "")) for c in categories}
    fact_names = frozenset(str(f.get("name", "")) for f in facts)
    lists = set(data.get("words") or {}) if isinstance(data.get("words"), dict) else set()
    for i, rule in enumerate(rules):
        if rule.get("category") not in (None, "") and str(rule["category"]) not in names:
            errors.append(f"rules[{i}].category: unknown category {rule['category']!r} (categories: "
                          f"{', '.join(sorted(names))})")
        for key in ("when", "any_of", "none_of"):
            lines = rule.get(key) if isinstance(rule.get(key), list) else []
            for j, line in enumerate(lines):
                errors += _line_errors(f"rules[{i}].{key}[{j}]", str(line), names, fact_names, lists)
    for i, fact in enumerate(facts):
        if fact.get("type") == "one_of" and fact.get("default") not in (None, "") \
                and fact.get("default") not in (fact.get("options") or []):
            errors.append(f"facts[{i}].default: {fact.get('default')!r} is not one of the options")
    return errors


def _line_errors(where: str, line: str, categories: set, facts: frozenset, lists: set) -> list[str]:
    try:
        condition_parse(line)
    except ConditionError:
        return []  # the field's own error says why
    try:
        condition = condition_parse(line, facts=facts)
    except ConditionError as exc:
        return [f"{where}: {exc}"]
    if condition.field == "category" and condition.op in ("is", "is not", "in", "not in"):
        return [f"{where}: unknown category {value!r} (categories: {', '.join(sorted(categories))})"
                for value in condition.values if value not in categories]
    if condition.op == "mentions":
        return [f"{where}: unknown word list {value!r} (word lists: {', '.join(sorted(lists)) or 'none'})"
                for value in condition.values if value not in lists]
    return []


def _duplicates(where: str, noun: str, values: list[str]) -> list[str]:
    seen, out = set(), []
    for i, value in enumerate(values):
        if value in seen:
            out.append(f"{where}[{i}].name: duplicate {noun} name {value!r}")
        seen.add(value)
    return out


def canonical(spec: PlaybookSpec) -> str:
    return json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _where(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def spec_validate(data) -> PlaybookSpec:
    """The spec of `data` (a dict), or PlaybookInvalid listing every error with its field."""
    if not isinstance(data, dict):
        raise PlaybookInvalid(["playbook: must be a mapping of guidance, categories, rules, reply, checks, articles"])
    try:
        return PlaybookSpec.model_validate(data)
    except ValidationError as exc:
        errors = []
        for err in exc.errors():
            if err.get("type") == "value_error" and not err.get("loc"):
                continue  # the model-level check, reported below from the raw mapping
            message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            where = _where(err.get("loc", ()))
            for line in message.split("\n"):  # a model-level check reports several lines, each naming its field
                errors.append(line if not where else f"{where}: {line}")
        raise PlaybookInvalid(errors + consistency_errors(data)) from None


