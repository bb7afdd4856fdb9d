"""The structured-output schemas sent to the model are the portable strict subset.

Strict structured-output modes refuse schemas with keywords outside a small
subset (Azure OpenAI refuses `default`; `minLength`, `maxLength` and
`maxItems` have been refused with 400 "Invalid schema" too). What is checked
here is exactly what goes over the wire: the SDK's own
`to_strict_json_schema()` of each model, and the request body the fake server
received. The limits the schema no longer carries are enforced after parsing,
with the same failure as any schema break.
"""

import pytest
from openai.lib._pydantic import to_strict_json_schema

from ticketagent.llm.base import ModelError
from ticketagent.llm.openai_client import OpenAIModel
from ticketagent.llm.schemas import Decision, Reply, Triage, triage_schema
from ticketagent.playbooks.standard import standard_spec

from ..fakes.openai_server import UNPORTABLE_KEYWORDS, strict_schema_problem
from .test_model_client import TICKET, reply, tools, triage

MODELS = (Triage, Reply, Decision)


def _objects(schema):
    """Every object schema inside `schema`."""
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            yield schema
        for value in schema.values():
            yield from _objects(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _objects(item)


def _keywords(schema, found=None):
    """Every keyword used in a schema position (property names excluded)."""
    found = set() if found is None else found
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("properties", "$defs"):
                for sub in value.values():
                    _keywords(sub, found)
            else:
                found.add(key)
                _keywords(value, found)
    elif isinstance(schema, list):
        for item in schema:
            _keywords(item, found)
    return found


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_the_schema_the_sdk_sends_is_in_the_strict_subset(model):
    schema = to_strict_json_schema(model)
    objects = list(_objects(schema))
    assert objects, schema
    for obj in objects:
        assert obj["additionalProperties"] is False, obj
        assert obj["required"] == list(obj["properties"]), obj
    assert not _keywords(schema) & set(UNPORTABLE_KEYWORDS), schema
    assert _keywords(schema) <= {"type", "properties", "required", "additionalProperties", "enum", "anyOf",
                                 "items", "title", "description"}, schema
    assert strict_schema_problem(schema) == ""


def test_the_schemas_sent_are_exactly_these():
    """A change to what the model is asked for shows up here, on purpose."""
    actions = ["save_draft", "notify_customer", "set_status", "close_ticket", "escalate"]
    statuses = ["open", "pending", "solved", "escalated", "on_hold"]
    assert to_strict_json_schema(Decision) == {
        "title": "Decision", "type": "object", "additionalProperties": False,
        "required": ["actions", "status", "reason"],
        "properties": {
            "actions": {"title": "Actions", "type": "array", "items": {"enum": actions, "type": "string"}},
            "status": {"title": "Status", "anyOf": [{"enum": statuses, "type": "string"}, {"type": "null"}]},
            "reason": {"title": "Reason", "type": "string"},
        },
    }
    assert to_strict_json_schema(Reply)["properties"] == {"subject": {"title": "Subject", "type": "string"},
                                                          "body": {"title": "Body", "type": "string"}}
    triage_props = to_strict_json_schema(Triage)["properties"]
    assert triage_props["language"] == {"title": "Language", "type": "string"}
    assert triage_props["summary"] == {"title": "Summary", "type": "string"}


def test_the_fake_refuses_what_strict_servers_refuse():
    """The check the fake server applies to every request is not a rubber stamp."""
    assert "'maxLength' is not permitted" in strict_schema_problem(
        {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}}, "required": ["a"],
         "additionalProperties": False})
    assert "'default' is not permitted" in strict_schema_problem(
        {"type": "object", "properties": {"a": {"type": "string", "default": ""}}, "required": ["a"],
         "additionalProperties": False})
    assert "required" in strict_schema_problem(
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": [], "additionalProperties": False})
    assert "additionalProperties" in strict_schema_problem(
        {"type": "object", "properties": {"default": {"type": "string"}}, "required": ["default"]})
    assert strict_schema_problem(  # a property may be called "default"
        {"type": "object", "properties": {"default": {"type": "string"}}, "required": ["default"],
         "additionalProperties": False}) == ""


def test_every_request_the_client_sends_is_accepted_by_a_strict_server(openai_server):
    model = OpenAIModel()
    t = model.triage(TICKET)
    r = model.draft(TICKET, t, tools())
    model.decide(TICKET, t, r)
    assert openai_server.by_behaviour == {"valid": 3}, "no request was refused as an invalid schema"
    for request in openai_server.requests:
        sent = request["body"]["response_format"]["json_schema"]
        assert sent["strict"] is True and strict_schema_problem(sent["schema"]) == ""
        triage = triage_schema(tuple(c.name for c in standard_spec().categories))  # the playbook's categories
        assert sent["schema"] == to_strict_json_schema({"Triage": triage, "Reply": Reply,
                                                        "Decision": Decision}[sent["name"]])


@pytest.mark.parametrize("call", ["triage", "draft", "decide"])
def test_an_answer_over_the_limits_fails_like_a_schema_break(openai_server, call):
    """The limits are no longer in the schema; they are still enforced, with the same failure."""
    openai_server.mode = "over_limits"
    model = OpenAIModel()
    run = {"triage": lambda: model.triage(TICKET), "draft": lambda: model.draft(TICKET, triage(), tools()),
           "decide": lambda: model.decide(TICKET, triage(), reply())}[call]
    with pytest.raises(ModelError) as err:
        run()
    assert err.value.kind == "schema", err.value.message
    assert err.value.message.startswith("the model's answer did not match the schema")
    assert "at most" in err.value.message or "at least" in err.value.message, err.value.message
    assert openai_server.calls == 2, "retried once, like any schema failure"


def test_a_decision_without_a_reason_still_means_no_reason():
    """`reason` keeps its default on our side although the schema no longer sends it."""
    assert Decision.model_validate({"actions": [], "status": None}).reason == ""
