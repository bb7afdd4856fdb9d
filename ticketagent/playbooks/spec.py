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

from ticketagent.playbooks.conditions import Condition, ConditionError, condition_parse
from ticketagent.playbooks.contacts import contacts_found
from ticketagent.vocabulary import Action, Priority

FORMAT = 2  # the layout of a spec this code writes; a version written in another it cannot read is not run
# Format 1 (before the promise, secret, personal-data, contact allow-list and article-title checks) is read as
# format 2 with those checks at the standard playbook's settings: an old version or file loads, and holds more.
SUPPORTED_FORMATS = frozenset({1, 2})
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


def _condition_line(line: str) -> str:
    try:
        condition_parse(line)
    except ConditionError as exc:
        raise ValueError(str(exc)) from None
    return " ".join(line.split())


class RuleSpec(Spec):
    name: str = Field(min_length=1, max_length=120)
    when: list[Annotated[str, AfterValidator(_condition_line)]] = Field(min_length=1, max_length=10)
    forbid: list[Action] = Field(default_factory=list)
    require: list[Action] = Field(default_factory=list)
    approve: list[Action] = Field(default_factory=list)

    @model_validator(mode="after")
    def _does_something(self):
        if not (self.forbid or self.require or self.approve):
            raise ValueError("a rule forbids, requires or holds for approval at least one action")
        return self

    def conditions(self) -> list[Condition]:
        return [condition_parse(line) for line in self.when]


class ReplySettings(Spec):
    signature: str = Field(default="", max_length=500)
    language: str = Field(default="ticket", pattern=r"^(ticket|[a-z]{2,3}(-[A-Za-z]{2,4})?)$")
    max_chars: int = Field(default=2000, ge=100, le=10000)

    _known = field_validator("signature")(_placeholders_known)


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


def _standard_checks(name: str):
    """The standard playbook's setting `name` of its checks: the default of a file or version without it."""
    def default():
        return copy.deepcopy(_standard_check_settings()[name])  # a fresh list each time: the cache stays as read
    return default


@functools.cache
def _standard_check_settings() -> dict:
    return yaml.safe_load(STANDARD_FILE.read_text(encoding="utf-8"))["checks"]


PhraseLists = Annotated[dict[str, Annotated[list[str], Field(max_length=200)]],
                        Field(max_length=20), AfterValidator(_phrase_lists)]


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
    format: Literal[1, 2] = FORMAT
    name: str = Field(min_length=1, max_length=100)
    guidance: Guidance = Field(default_factory=Guidance)
    categories: list[CategorySpec] = Field(min_length=1, max_length=50)
    rules: list[RuleSpec] = Field(default_factory=list, max_length=100)
    reply: ReplySettings = Field(default_factory=ReplySettings)
    checks: ReplyChecks = Field(default_factory=ReplyChecks)
    articles: list[ArticleSpec] = Field(default_factory=list, max_length=500)

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data):
        """Format 1 is read as format 2: the checks it did not have take their defaults."""
        if isinstance(data, dict) and data.get("format", FORMAT) == 1:
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

    def content_hash(self) -> str:
        return hashlib.sha256(canonical(self).encode()).hexdigest()


def _listed(data: dict, section: str) -> list[dict]:
    return [entry for entry in data.get(section) or [] if isinstance(entry, dict)] \
        if isinstance(data.get(section), list) else []


def consistency_errors(data: dict) -> list[str]:
    """What no single field shows: duplicate category or rule names, a rule naming a category that does
    not exist. Read from the raw mapping, so they are reported beside the fields' own errors."""
    categories, rules = _listed(data, "categories"), _listed(data, "rules")
    errors = _duplicates("categories", "category", [str(c.get("name", "")) for c in categories])
    errors += _duplicates("rules", "rule", [str(r.get("name", "")) for r in rules])
    names = {str(c.get("name", "")) for c in categories}
    for i, rule in enumerate(rules):
        for j, line in enumerate(rule.get("when") or [] if isinstance(rule.get("when"), list) else []):
            try:
                condition = condition_parse(str(line))
            except ConditionError:
                continue  # the field's own error says why
            if condition.field == "category":
                errors += [f"rules[{i}].when[{j}]: unknown category {value!r} (categories: "
                           f"{', '.join(sorted(names))})" for value in condition.values if value not in names]
    return errors


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


