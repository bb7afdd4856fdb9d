"""How many tokens the model holds, as its endpoint says, and how many tokens a prompt takes.

A model reads its prompt and writes its answer within one context: a
request longer than it is refused (llama-server: HTTP 400 "request (2296
tokens) exceeds the available context size (2048 tokens)"). The endpoint
says its context where it can:

- llama-server: `GET /props`, `default_generation_settings.n_ctx` (one slot's
  context) and `.params.n_predict` (its cap on an answer, -1 for none);
- vLLM: `GET /v1/models`, the served model's `max_model_len`.

OpenAI's own API says neither: its models' contexts are far beyond any
playbook, and no limit is applied. What the endpoint said is kept in Redis
for ten minutes (every worker process and the web share it); an endpoint that
did not answer is asked again after a minute.

The prompt's tokens are estimated without the model's tokenizer
(`tokens_estimate`): one per three letters of a word (a space goes with the
word after it), one per digit, punctuation mark and line break, and one per
byte past the first of any other character. On SmolLM2's tokenizer (byte-level
BPE, 49k entries) that counts the Kestrel policy 1.42 times over, its
English tickets 1.3-1.9 times, Chinese 1.03 times; a short Dutch ticket 0.85
times: the estimate errs long on what a prompt is mostly made of, the
playbook's English instructions and guidance.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.request
from dataclasses import dataclass

from ticketagent.llm.base import MAX_COMPLETION_TOKENS, endpoint_is_local

ASK_TIMEOUT = 3.0  # s: the endpoint is on the same network as the model calls; 3 s is one that is down
KNOWN_SECONDS = 600  # what an endpoint said is kept this long
UNKNOWN_SECONDS = 60  # an endpoint that did not answer is asked again after this
MESSAGE_TOKENS = 8  # what a chat template adds around each message (role, start and end markers)


@dataclass(frozen=True)
class Context:
    """The model's context: `tokens` in all, `answer_tokens` of them kept for its answer."""

    tokens: int
    answer_tokens: int
    who: str = "the model"  # how a message names the model ("the local model holds 2,048")

    @property
    def prompt_tokens(self) -> int:
        """What a prompt may take: the context less the answer's room."""
        return self.tokens - self.answer_tokens

    def as_dict(self) -> dict:
        return {"tokens": self.tokens, "answer_tokens": self.answer_tokens, "who": self.who}


def answer_room(tokens: int, n_predict: int | None) -> int:
    """What an answer may take in a context of `tokens`: the server's own cap on answers when it has one,
    else a quarter of the context, never more than MAX_COMPLETION_TOKENS."""
    if n_predict and n_predict > 0:
        return min(n_predict, MAX_COMPLETION_TOKENS, tokens // 2)
    return min(MAX_COMPLETION_TOKENS, tokens // 4)


def _get(url: str, api_key: str) -> dict | None:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=ASK_TIMEOUT) as response:  # noqa: S310 - the configured endpoint
            data = json.loads(response.read(1 << 20) or b"{}")
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _positive(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def context_asked(base_url: str | None, api_key: str, model: str) -> tuple[Context | None, bool]:
    """(the endpoint's context, whether it answered): llama-server's /props, else vLLM's /v1/models.
    (None, True): it answered and says no context (OpenAI's API); (None, False): it did not answer."""
    base = (base_url or "https://api.openai.com/v1").rstrip("/")
    who = "the local model" if endpoint_is_local(base_url) else "the model"
    props = _get(re.sub(r"/v1$", "", base) + "/props", api_key)
    settings = props.get("default_generation_settings") if props else None
    if isinstance(settings, dict) and _positive(settings.get("n_ctx")):
        tokens = settings["n_ctx"]
        params = settings.get("params") if isinstance(settings.get("params"), dict) else {}
        n_predict = params.get("n_predict", settings.get("n_predict"))
        return Context(tokens, answer_room(tokens, n_predict if isinstance(n_predict, int) else None), who), True
    models = _get(base + "/models", api_key)
    for entry in (models or {}).get("data") or []:
        if isinstance(entry, dict) and entry.get("id") == model and _positive(entry.get("max_model_len")):
            return Context(entry["max_model_len"], answer_room(entry["max_model_len"], None), who), True
    return None, models is not None or props is not None


def context_cached(conn, endpoint: str, ask) -> Context | None:
    """`ask()`'s (context, answered), kept in Redis (`conn`) under `endpoint`: KNOWN_SECONDS when the endpoint
    answered, UNKNOWN_SECONDS when it did not. Without Redis, asked each time."""
    key = f"ticketagent:governor:context:{endpoint}"
    try:
        kept = conn.get(key)
    except Exception:  # noqa: BLE001 - no Redis: ask the endpoint
        kept = None
    if kept is not None:
        data = json.loads(kept)
        return Context(**data) if data else None
    context, answered = ask()
    try:
        conn.set(key, json.dumps(context.as_dict() if context else None),
                 ex=KNOWN_SECONDS if answered else UNKNOWN_SECONDS)
    except Exception:  # noqa: BLE001 - kept for next time only where Redis is there
        pass
    return context


# --------------------------------------------------------------------------- counting

_PIECES = re.compile(r"[A-Za-z]+|[0-9]|\s+|[^\sA-Za-z0-9]")


def tokens_estimate(text: str) -> int:
    """At least as many tokens as `text` takes on a byte-level BPE vocabulary (see the module's docstring)."""
    count = 0
    for piece in _PIECES.findall(text or ""):
        if piece[0].isascii() and piece[0].isalpha():
            count += math.ceil(len(piece) / 3)
        elif piece[0].isspace():
            count += piece.count("\n")  # a space goes with the word after it
        else:
            count += 1 if piece.isascii() else len(piece.encode()) - 1
    return count


def messages_tokens(messages: list[dict], tools: list | None = None) -> int:
    """At least how many tokens a chat request's prompt takes: each message's text and tool calls, the tools."""
    count = tokens_estimate(json.dumps(tools, ensure_ascii=False)) if tools else 0
    for message in messages:
        count += MESSAGE_TOKENS + tokens_estimate(message.get("content") or "")
        for call in message.get("tool_calls") or ():
            count += tokens_estimate(json.dumps(call, ensure_ascii=False))
    return count
