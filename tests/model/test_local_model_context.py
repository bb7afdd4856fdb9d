"""The real local model's context (2,048 tokens, `ops.model.CONTEXT`): asked at its /props, the Kestrel playbook's
prompts fit it, and a prompt past it is refused with llama-server's own reason, which the step's failure says."""

import pytest

from ops import model
from ticketagent.llm.base import ModelError, Usage
from ticketagent.llm.context import Context, messages_tokens
from ticketagent.llm.openai_client import OpenAIModel
from ticketagent.llm.prompts import ticket_text, triage_prompt

from ..agent import kestrel
from ..conftest import skip_or_fail

pytestmark = pytest.mark.slow


def test_the_local_models_context_is_asked_at_its_props(on_local_model):
    assert OpenAIModel().context() == Context(model.CONTEXT, model.CONTEXT // 4, "the local model")


def test_a_kestrel_ticket_is_triaged_within_the_context_and_the_estimate_errs_long(on_local_model):
    if kestrel.present():
        skip_or_fail(kestrel.present())
    spec, ticket = kestrel.spec(), kestrel.tickets()["KC-1009"]
    # without the facts the model fills in: their answer does not fit the 256 tokens the tests' server writes
    spec = spec.model_copy(update={"facts": [f for f in spec.facts if f.source != "extract"]})
    usage = Usage()
    triage = OpenAIModel().triage(ticket, playbook=spec, usage=usage)
    assert triage.category in {c.name for c in spec.categories}
    estimated = messages_tokens([{"role": "system", "content": triage_prompt(spec, ticket)},
                                 {"role": "user", "content": ticket_text(ticket)}])
    assert 0 < usage.prompt_tokens <= estimated < model.CONTEXT


def test_a_prompt_past_the_context_is_refused_with_the_servers_reason(on_local_model, monkeypatch):
    monkeypatch.setattr(OpenAIModel, "context", lambda self: None)  # as an endpoint that does not say its context
    ticket = {"ticket_id": "LM-2", "subject": "Refund", "priority": "normal", "language": "en",
              "body": "My order arrived broken and I would like my money back, please. " * 300}
    with pytest.raises(ModelError) as caught:
        OpenAIModel().triage(ticket)
    assert caught.value.kind == "bad_request"
    assert caught.value.message.startswith("the model API rejected the request (HTTP 400): request (")
    assert f"exceeds the available context size ({model.CONTEXT} tokens)" in caught.value.message
