"""The draft step's tools on the real local model, through a recording proxy (tests/fakes/model_proxy.py).

The draft step offers `customer_tickets` and `knowledge_base`. On llama-server
SmolLM2-135M has never asked for either: the step then answers without
looking anything up, in one turn (two when its first answer did not match
the schema and the step asked once more). Either way it ends within AGENT_MAX_STEPS
turns, with a Reply or with a classified reason. A server that ignores the
schema (here: the proxy drops `response_format`) lets the model answer in
prose: the step asks once more, then fails with "did not match the schema".
"""

import json

import pytest

from ticketagent.llm.base import ModelError, Tools
from ticketagent.llm.openai_client import OpenAIModel
from ticketagent.llm.schemas import Reply, Triage

from ..fakes.model_proxy import ModelProxy

pytestmark = pytest.mark.slow

TICKET = {"ticket_id": "LM-1", "subject": "Charged twice", "priority": "normal", "language": "en",
          "body": "My card was charged twice for invoice 1043. Please refund one."}
TRIAGE = Triage(category="billing", priority="normal", sentiment="negative", language="en",
                summary="The customer was charged twice and asks for a refund.")
KNOWLEDGE = [{"topic": "billing", "answer": "Duplicate charges are refunded within 5 business days."}]
CLEAR = ("did not match the schema", "cut off (token limit)")


@pytest.fixture
def proxy(on_local_model, settings):
    running = ModelProxy(f"http://127.0.0.1:{on_local_model.port}").start()
    settings.OPENAI_BASE_URL = running.base_url
    yield running
    running.stop()


def kit() -> Tools:
    return Tools(customer_tickets=lambda: [], knowledge_base=lambda query: KNOWLEDGE)


def tool_calls(answer) -> list:
    return (answer.get("choices") or [{}])[0].get("message", {}).get("tool_calls") or [] if isinstance(answer, dict) \
        else []


def matches_reply(answer) -> bool:
    """Whether a proxied answer is a Reply the step would have accepted."""
    try:
        choice = answer["choices"][0]
        return choice.get("finish_reason") != "length" and bool(
            Reply.model_validate_json(choice["message"]["content"] or ""))
    except (KeyError, IndexError, TypeError, ValueError):
        return False


def test_the_draft_offers_its_tools_and_ends_within_the_step_limit(proxy, settings):
    tools = kit()
    try:
        outcome = OpenAIModel().draft(TICKET, TRIAGE, tools)
    except ModelError as exc:  # the model rambled to the token limit: a classified, readable reason
        assert exc.kind == "schema" and any(words in exc.message for words in CLEAR), exc.message
        outcome = exc
    turns = proxy.exchanges
    assert 1 <= len(turns) <= settings.AGENT_MAX_STEPS
    for request, status, _ in turns:
        assert [t["function"]["name"] for t in request["tools"]] == ["customer_tickets", "knowledge_base"]
        assert request["response_format"]["json_schema"]["name"] == "Reply" and status == 200
    asked = [call for _, _, answer in turns for call in tool_calls(answer)]
    if asked:  # the round trip: every call the model made was run and its result sent back
        assert [c["tool"] for c in tools.calls] == [c["function"]["name"] for c in asked]
        results = [m for m in turns[-1][0]["messages"] if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in results] == [c["id"] for c in asked]
    else:  # a model that does not call tools: the draft is written without lookups, in one turn,
        # or in two when the first answer did not match the schema (the step asks once more)
        assert tools.calls == [] and len(turns) in (1, 2)
        if len(turns) == 2:
            assert not matches_reply(turns[0][2]), "a second turn only after an answer that did not match"
    if isinstance(outcome, Reply):
        assert outcome.subject and outcome.body
    print(f"  tools asked for: {len(asked)}; turns: {len(turns)}; outcome: {type(outcome).__name__}")


def test_a_model_answering_in_prose_fails_the_step_with_a_clear_reason(proxy, settings):
    proxy.drop = {"response_format"}  # a server that ignores structured outputs
    # greedy decoding: the server's default temperature (0.8) let the model write the schema's JSON by chance
    proxy.set = {"temperature": 0, "seed": 7}
    with pytest.raises(ModelError) as failed:
        OpenAIModel().draft(TICKET, TRIAGE, kit())
    assert failed.value.kind == "schema"
    assert any(words in failed.value.message for words in CLEAR), failed.value.message
    turns = proxy.exchanges
    assert 1 <= len(turns) <= min(2, settings.AGENT_MAX_STEPS), "one more try, then the clear failure"
    assert all("response_format" not in request for request, _, _ in turns)
    prose = turns[0][2]["choices"][0]["message"]["content"] or ""
    try:
        parsed = json.loads(prose)
    except ValueError:
        parsed = None
    assert not isinstance(parsed, dict) or set(parsed) != {"subject", "body"}, "the model answered in prose"
    print(f"  prose answer: {prose[:120]!r}; reason: {failed.value.message[:160]}")


MALFORMED = [
    {"role": "assistant", "content": None, "tool_calls": [  # arguments that are not JSON
        {"id": "call_bad_json", "type": "function", "function": {"name": "knowledge_base", "arguments": "{query: refund"}}]},
    {"role": "assistant", "content": None, "tool_calls": [  # a tool this agent does not have
        {"id": "call_unknown", "type": "function", "function": {"name": "refund_customer", "arguments": "{}"}}]},
]


def test_malformed_tool_calls_are_answered_and_the_step_ends_within_its_limit(proxy, settings):
    """Two malformed calls reach the agent as if the real model had made them.
    Arguments that are not JSON fail the SDK's parse: the turn counts as an
    answer that did not match the schema and is asked once more. A tool that
    does not exist is answered with an error result, which the real model
    reads on the next turn. The step then ends with the real model's draft,
    or with a classified reason, within AGENT_MAX_STEPS turns."""
    proxy.forge = [dict(message) for message in MALFORMED]
    tools = kit()
    try:
        outcome = OpenAIModel().draft(TICKET, TRIAGE, tools)
    except ModelError as exc:
        assert exc.kind in ("schema", "step_limit"), exc.message
        assert any(words in exc.message for words in CLEAR + ("step limit",)), exc.message
        outcome = exc
    turns = proxy.exchanges
    assert 3 <= len(turns) <= settings.AGENT_MAX_STEPS
    assert all(m["role"] != "tool" for m in turns[1][0]["messages"]), "the call with broken JSON was not run"
    assert tools.calls[0] == {"tool": "refund_customer", "arguments": {}}
    results = {m["tool_call_id"]: m["content"] for m in turns[2][0]["messages"] if m["role"] == "tool"}
    assert "unknown tool 'refund_customer'" in results["call_unknown"]
    if isinstance(outcome, Reply):
        assert outcome.subject and outcome.body
    print(f"  turns: {len(turns)}; outcome: {type(outcome).__name__}")
