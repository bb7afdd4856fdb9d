"""The model boundary's shared parts: the error every model failure becomes, the tools a model may call, its bound."""

import ipaddress
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Protocol
from urllib.parse import urlsplit

from ticketagent.llm.schemas import Reply


class ModelError(Exception):
    KINDS = {
        # rate_limit, timeout, connection: no longer raised (the governor waits them out); kept for older items
        "rate_limit": "model rate limit",
        "timeout": "model timeout",
        "connection": "model connection error",
        "server": "model server error",
        "bad_request": "model rejected the request",
        "context": "the prompt does not fit the model's context",
        "auth": "model authentication failed",
        "schema": "model output did not match the schema",
        "step_limit": "step limit",
        "unavailable": "waiting for the model API",  # a rate limit or an outage: the item is handed back
    }

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message

    @property
    def label(self) -> str:
        return self.KINDS.get(self.kind, self.kind)


# The most a model may answer in one call, sent as `max_completion_tokens`: with the prompt's bound below, what a
# call can cost at most, which a task's budget reserves before the call (pipeline/budget.py). The longest answer
# the schemas allow (a reply of 10,000 characters) fits in it; an answer cut at it fails as a schema break.
MAX_COMPLETION_TOKENS = 4096


def prompt_tokens_bound(request: dict) -> int:
    """At most how many prompt tokens a completion `request` is: its bytes as JSON. A token of the byte-level
    tokenizers these models use stands for one byte or more, and the JSON's keys and quotes outnumber the few
    tokens a message's role adds (in practice the bound is 2-4 times the count)."""
    return len(json.dumps(request, ensure_ascii=False, default=str).encode())


class Allowance(Protocol):
    """What a model call of a task with a budget asks before it starts (`pipeline.budget.CallAllowance`): room in
    the budget for the call's bounds. Returns once it is reserved; raises, and the call is not made, when the
    item must stop (its task reached its budget, or stopped)."""

    def reserve(self, *, prompt_tokens: int, completion_tokens: int) -> None: ...


@dataclass
class Usage:
    """What one step's model calls cost: tokens (from the API's `usage`), calls and seconds waited."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    seconds: float = 0.0
    model: str = ""
    # what the calls cost in USD by the price table when they were recorded (None: unknown, no price for the model)
    cost_usd: Decimal | None = None

    def add(self, usage, seconds: float, model: str = "") -> None:
        """One call's `usage` (the SDK's object, or None when the API sent none) and its latency."""
        self.calls += 1
        self.seconds += seconds
        self.model = model or self.model
        if usage is not None:
            self.prompt_tokens += getattr(usage, "prompt_tokens", 0) or 0
            self.completion_tokens += getattr(usage, "completion_tokens", 0) or 0
            details = getattr(usage, "prompt_tokens_details", None)
            self.cached_tokens += getattr(details, "cached_tokens", 0) or 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict:
        """What a step's event records (nothing when no call was made)."""
        if not self.calls:
            return {}
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "cached_tokens": self.cached_tokens, "ms": round(self.seconds * 1000), "model": self.model}


@dataclass
class Tools:
    """Read-only tools the model may call while drafting (effect class: recompute)."""

    customer_tickets: Callable[[], list[dict]]
    knowledge_base: Callable[[str], list[dict]]
    calls: list[dict] = field(default_factory=list)
    articles: list[dict] = field(default_factory=list)  # the articles the knowledge tool returned: {id, title}

    def run(self, name: str, arguments: dict) -> object:
        if name == "customer_tickets":
            result = self.customer_tickets()
        elif name == "knowledge_base":
            result = self.knowledge_base(str(arguments.get("query", ""))[:200])
            for article in result if isinstance(result, list) else ():
                if "id" in article and all(a["id"] != article["id"] for a in self.articles):
                    self.articles.append({"id": article["id"], "title": article.get("title", "")})
        else:
            result = {"error": f"unknown tool {name!r}"}
        self.calls.append({"tool": name, "arguments": arguments})
        return result


def one_line_subject(reply: Reply) -> Reply:
    """A reply subject becomes an email header: no line breaks, whatever the model wrote
    (a "\nBcc: ..." in a subject is header injection, and Django refuses to send it)."""
    subject = " ".join(reply.subject.split()) or "Re: your request"
    return reply if subject == reply.subject else reply.model_copy(update={"subject": subject})


def endpoint_label(base_url: str | None, model: str) -> str:
    """How the UI names a model behind the OpenAI API: "local model: <name>" for a server on this machine
    (a loopback OPENAI_BASE_URL, e.g. `MODEL=local make run`'s llama-server), else "OpenAI model <name>"."""
    return f"local model: {model}" if endpoint_is_local(base_url) else f"OpenAI model {model}"


def endpoint_is_local(base_url: str | None) -> bool:
    """A model server on this machine: OPENAI_BASE_URL's host is a loopback address or localhost."""
    host = (urlsplit(base_url or "").hostname or "").lower()
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
