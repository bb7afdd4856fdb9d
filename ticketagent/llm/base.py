"""The model boundary's shared parts: the error every model failure becomes, and the tools a model may call."""

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ticketagent.llm.schemas import Reply


class ModelError(Exception):
    KINDS = {
        "rate_limit": "model rate limit",
        "timeout": "model timeout",
        "connection": "model connection error",
        "server": "model server error",
        "bad_request": "model rejected the request",
        "auth": "model authentication failed",
        "schema": "model output did not match the schema",
        "step_limit": "step limit",
    }

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message

    @property
    def label(self) -> str:
        return self.KINDS.get(self.kind, self.kind)


@dataclass
class Tools:
    """Read-only tools the model may call while drafting (effect class: recompute)."""

    customer_tickets: Callable[[], list[dict]]
    knowledge_base: Callable[[str], list[dict]]
    calls: list[dict] = field(default_factory=list)

    def run(self, name: str, arguments: dict) -> object:
        if name == "customer_tickets":
            result = self.customer_tickets()
        elif name == "knowledge_base":
            result = self.knowledge_base(str(arguments.get("query", ""))[:200])
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
    host = (urlsplit(base_url or "").hostname or "").lower()
    try:
        local = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = False
    return f"local model: {model}" if local else f"OpenAI model {model}"
