"""The model's context: asked of its endpoint, prompts built within it, publishing refused when they cannot fit,
and a refused request's reason kept on its item.

Against the fake server as llama-server with a context of 2,048 tokens (the
local model's): it says so at /props and refuses a longer prompt with
llama-server's HTTP 400 and words. The Kestrel playbook is the example's
(tests/agent/kestrel.py); the real llama-server does the same in
tests/model/test_local_model_context.py.
"""

import pytest

from ticketagent.llm.base import ModelError
from ticketagent.llm.clients import publish_fit
from ticketagent.llm.context import Context, messages_tokens, tokens_estimate
from ticketagent.llm.fit import TICKET_ROOM, playbook_needs, results_fit, text_cut
from ticketagent.llm.openai_client import OpenAIModel
from ticketagent.models import Item, ItemStatus
from ticketagent.pipeline.run import item_process
from ticketagent.playbooks.services import playbook_import, version_publish
from ticketagent.playbooks.spec import PlaybookInvalid, spec_validate

from ..conftest import skip_or_fail
from ..factories import make_task
from . import kestrel

pytestmark = pytest.mark.django_db(transaction=True)

LOCAL = 2048
REFUSED = "request ({n} tokens) exceeds the available context size (2048 tokens), try increasing it"


def long_guidance() -> dict:
    """The Kestrel playbook with its policy's rules pasted into its guidance, as the policy that did not fit."""
    policy = (kestrel.KESTREL / "policy.md").read_text(encoding="utf-8")
    data = kestrel.spec().model_dump(mode="json")
    data["name"] = "Kestrel Cycles, whole policy"
    data["guidance"]["policies"] = policy[:4000]
    data["guidance"]["escalation"] = policy[4000:8000]
    return data


@pytest.fixture
def kestrel_here():
    if kestrel.present():
        skip_or_fail(kestrel.present())


@pytest.fixture
def llama_like(openai_server):
    openai_server.configure(n_ctx=LOCAL)
    return openai_server


def test_the_context_is_what_the_endpoint_says_at_props(llama_like):
    assert OpenAIModel().context() == Context(LOCAL, LOCAL // 4, "the local model")


def test_an_endpoint_that_says_no_context_sets_no_limit(openai_server):
    assert OpenAIModel().context() is None


def test_a_long_ticket_is_cut_to_the_context_and_the_model_takes_it(llama_like):
    ticket = {"ticket_id": "T-1", "subject": "Refund", "priority": "normal", "language": "en",
              "body": "My order arrived broken and I would like my money back, please. " * 200}
    triage = OpenAIModel().triage(ticket)
    assert triage.category
    sent = llama_like.requests[-1]["body"]
    assert sent["max_completion_tokens"] == LOCAL // 4, "the answer's tokens are kept free"
    assert "[…]" in sent["messages"][-1]["content"], "the ticket's text was cut, and says so"
    assert messages_tokens(sent["messages"]) <= LOCAL - LOCAL // 4
    assert llama_like.by_behaviour["400"] == 0


def test_a_refused_request_says_the_servers_reason_on_the_item(llama_like, sandbox, queue):
    llama_like.configure(props=False)  # the endpoint does not say its context: the prompt is sent whole
    item = make_task(1).items.get()
    item.body = "My order arrived broken and I would like my money back, please. " * 200
    item.save(update_fields=["body"])
    assert item_process(item_id=item.pk, attempt=item.attempt).startswith("failed at triage")
    item.refresh_from_db()
    assert item.status == ItemStatus.FAILED and item.failure_kind == "bad_request"
    assert "the model API rejected the request (HTTP 400): request (" in item.last_error
    assert "exceeds the available context size (2048 tokens), try increasing it" in item.last_error


def test_a_refusals_reason_has_no_secret(openai_server, settings):
    import httpx2
    from openai import BadRequestError

    echoed = f"invalid header Authorization: Bearer {settings.OPENAI_API_KEY}; key {settings.OPENAI_API_KEY}"
    response = httpx2.Response(400, json={"error": {"message": echoed}},
                               request=httpx2.Request("POST", openai_server.base_url + "/chat/completions"))
    said = OpenAIModel()._classify(BadRequestError("Error code: 400", response=response, body={"message": echoed}))
    assert said.kind == "bad_request" and settings.OPENAI_API_KEY not in said.message
    assert said.message.startswith("the model API rejected the request (HTTP 400): invalid header Authorization: ")
    assert "[redacted]" in said.message


def test_a_prompt_that_cannot_fit_is_not_sent(llama_like, kestrel_here):
    spec = spec_validate(long_guidance())
    with pytest.raises(ModelError) as caught:
        OpenAIModel().triage({"ticket_id": "T-1", "subject": "Hi", "body": "Where is my bike?", "priority": "normal",
                              "language": "en"}, playbook=spec)
    assert caught.value.kind == "context"
    assert "tokens (" in caught.value.message and "the local model holds 2,048" in caught.value.message
    assert llama_like.calls == 0


def test_the_knowledge_tools_articles_fit_the_room_left_the_tickets_category_first():
    articles = [{"id": i, "title": title, "body": "word " * 150, "tags": tags}
                for i, (title, tags) in enumerate([("Delivery times", []), ("Refunds", ["billing"]),
                                                   ("Returns", [])])]
    kept = results_fit(articles, 500, category="billing")
    assert tokens_estimate(kept) <= 500
    assert kept.startswith('[{"id": 1, "title": "Refunds"'), "the category's article first"
    assert '"title": "Delivery times"' in kept and '"Returns"' not in kept, "the next cut, the last left out"
    assert text_cut("a b c d e f", 5) == "a […]" and text_cut("word", 0) == ""


# --------------------------------------------------------------------------- publishing


def test_the_kestrel_playbook_fits_the_local_models_context_and_publishes(llama_like, kestrel_here):
    spec = kestrel.spec()
    needs, _step = playbook_needs(spec, Context(LOCAL, LOCAL // 4, "the local model"))
    assert needs <= LOCAL
    version = playbook_import(data=spec.model_dump(mode="json"), publish=True, fits=publish_fit())
    assert not version.is_draft


def test_publishing_a_playbook_whose_prompts_cannot_fit_says_so_with_the_numbers(llama_like, kestrel_here):
    version = playbook_import(data=long_guidance())
    with pytest.raises(PlaybookInvalid) as caught:
        version_publish(version_id=version.pk, fits=publish_fit())
    message = str(caught.value)
    needs, step = playbook_needs(spec_validate(long_guidance()), Context(LOCAL, LOCAL // 4, "the local model"))
    assert needs > LOCAL
    assert f"the {step} step needs {needs:,} tokens, the local model holds 2,048" in message
    assert f"{LOCAL // 4:,} kept for the answer and {TICKET_ROOM} for the ticket's text" in message
    version.refresh_from_db()
    assert version.is_draft, "nothing was published"


def test_without_a_known_context_publishing_is_as_before(openai_server, kestrel_here):
    version = playbook_import(data=long_guidance(), publish=True, fits=publish_fit())
    assert not version.is_draft
    assert Item.objects.count() == 0
