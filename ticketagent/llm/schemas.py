"""The structured outputs a model must produce (validated with pydantic).

The action allow-list (`ticketagent.vocabulary`, shared with the playbooks) is checked here: nothing a ticket
says can add to it.

What is *sent* to the model as the JSON schema (``model_json_schema()``, which
the SDK's ``type_to_response_format_param()`` turns into a strict ``response_format``,
built once per schema: ``openai_client.response_format()``)
is the portable subset every strict implementation accepts: types, enums,
``anyOf``, every property required, no extra properties. Length and count
limits and defaults are not sent -- strict modes have refused ``minLength``,
``maxLength``, ``maxItems`` and ``default`` with a 400 "Invalid schema" -- but
they stay on the fields below and are checked when the answer is parsed: an
answer over a limit fails like any other schema break (ModelError "schema").
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from ticketagent.vocabulary import Action, HelpdeskStatus, Priority

SCHEMA_VERSION = 1

Sentiment = Literal["negative", "neutral", "positive"]

ALLOWED_ACTIONS: tuple[str, ...] = Action.__args__  # type: ignore[attr-defined]

# JSON-schema keywords checked after parsing instead of being sent to the model.
NOT_SENT = frozenset({"default", "minLength", "maxLength", "minItems", "maxItems"})
# Keys whose value maps names to schemas (a property may be called "default").
_NAMED_SCHEMAS = frozenset({"properties", "$defs", "definitions"})


def portable_schema(node: Any) -> Any:
    """`node` without the NOT_SENT keywords, at any depth."""
    if isinstance(node, list):
        return [portable_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in NOT_SENT:
            continue
        if key in _NAMED_SCHEMAS and isinstance(value, dict):
            out[key] = {name: portable_schema(schema) for name, schema in value.items()}
        else:
            out[key] = portable_schema(value)
    return out


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @classmethod
    def model_json_schema(cls, *args, **kwargs) -> dict[str, Any]:
        """The schema sent to the model: the portable subset (see the module's docstring)."""
        return portable_schema(super().model_json_schema(*args, **kwargs))


# A triage; its category is one of the playbook's: `triage_schema()` is what a model is asked for.
class Triage(Strict):
    category: str = Field(max_length=40)
    priority: Priority
    sentiment: Sentiment
    language: str = Field(max_length=16)
    summary: str = Field(max_length=1000)


class Reply(Strict):
    subject: str = Field(min_length=1, max_length=300)
    body: str = Field(min_length=1, max_length=10000)


class Decision(Strict):
    actions: list[Action] = Field(max_length=5)
    status: HelpdeskStatus | None = None
    reason: str = Field(default="", max_length=1000)


class MoneyValue(Strict):
    amount: float
    currency: str = Field(max_length=8)


# A fact the playbook asks the model to extract in triage: (name, type, options, description); None is "not known".
FactField = tuple[str, str, tuple[str, ...], str]
_FACT_TYPES: dict[str, Any] = {"text": str, "number": float, "money": MoneyValue, "date": str, "yes_no": bool}
_TRIAGE_SCHEMAS: dict[tuple, type[Triage]] = {}


def triage_schema(categories: tuple[str, ...], facts: tuple[FactField, ...] = ()) -> type[Triage]:
    """The triage a model must produce under a playbook: its category one of `categories` (an enum in
    the schema sent), and with `facts` the values it extracts from the ticket (`facts`, each one of its
    type or null when the ticket does not say). Built once per set of categories and facts."""
    key = (categories, facts)
    schema = _TRIAGE_SCHEMAS.get(key)
    if schema is None:
        fields: dict[str, Any] = {"category": (Literal[categories], ...)}  # type: ignore[valid-type]
        if facts:
            kinds = {name: (Literal[options] if kind == "one_of" else _FACT_TYPES[kind]) | None  # type: ignore
                     for name, kind, options, _ in facts}
            model = create_model("Facts", __base__=Strict, **{
                name: (kinds[name], Field(description=description or name)) for name, _, _, description in facts})
            fields["facts"] = (model, ...)
        schema = _TRIAGE_SCHEMAS[key] = create_model("Triage", __base__=Triage, **fields)
    return schema
