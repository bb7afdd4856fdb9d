"""The OpenAI client: structured outputs through the official SDK, every failure classified as a ModelError."""

import json
import logging
import time

from django.conf import settings
from pydantic import ValidationError

from ledger.channels.redact import redact
from ticketagent.governor import Waited, governor_for
from ticketagent.llm.base import (
    MAX_COMPLETION_TOKENS,
    Allowance,
    ModelError,
    Tools,
    Usage,
    endpoint_label,
    one_line_subject,
    prompt_tokens_bound,
)
from ticketagent.llm.context import Context, context_asked, context_cached, messages_tokens
from ticketagent.llm.fit import messages_fit, results_fit, too_long, tool_room
from ticketagent.llm.prompts import (
    TOOL_SPECS,
    decide_prompt,
    decide_user,
    draft_prompt,
    draft_user,
    ticket_text,
    triage_prompt,
)
from ticketagent.llm.schemas import Decision, Reply, triage_schema
from ticketagent.playbooks.spec import PlaybookSpec
from ticketagent.playbooks.standard import standard_spec
from ticketagent.stopping import on_process_stop, process_stopping

log = logging.getLogger(__name__)

REASON_MAX_CHARS = 300  # a refused request's reason as the item shows it


_RESPONSE_FORMATS: dict[type, dict] = {}


def response_format(schema) -> dict:
    """The `response_format` of a schema (strict JSON schema), built once per schema: the SDK's
    `parse()` would build it and walk it again on every call (4-5 ms of a worker's CPU a call)."""
    fmt = _RESPONSE_FORMATS.get(schema)
    if fmt is None:
        from openai.lib._parsing import type_to_response_format_param  # the SDK loads with the client

        fmt = _RESPONSE_FORMATS[schema] = type_to_response_format_param(schema)
    return fmt


def _retry_after(response) -> float | None:
    """A 429's `retry-after` (seconds) or `retry-after-ms`, if it says one."""
    headers = getattr(response, "headers", {}) or {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return float(headers.get(name)) * scale
        except (TypeError, ValueError):
            continue
    return None


def server_reason(exc) -> str:
    """What the server said when it refused a request (its error's `message`, else its body's text), on one
    line, at most REASON_MAX_CHARS, with every configured secret and credential-looking token redacted."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        text = inner.get("message") if isinstance(inner, dict) else inner
    else:
        text = body
    if not isinstance(text, str) or not text.strip():
        try:
            text = exc.response.text
        except Exception:  # noqa: BLE001 - no body to read: the status says it all
            text = ""
    text = " ".join(redact(str(text or "")).split())
    return text if len(text) <= REASON_MAX_CHARS else text[:REASON_MAX_CHARS - 1] + "…"


def _validation_summary(exc: ValidationError) -> str:
    """A short, operator-readable account of a schema mismatch (no pydantic URLs)."""
    parts = []
    for err in exc.errors()[:4]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "answer"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    more = exc.error_count() - len(parts)
    return f"{exc.title}: " + "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


class OpenAIModel:
    def __init__(self):
        import httpx2
        import openai

        from ticketagent.llm.transport import CuttableTransport

        self._openai = openai
        self.label = endpoint_label(settings.OPENAI_BASE_URL, settings.OPENAI_MODEL)
        self.model = settings.OPENAI_MODEL
        self.max_steps = settings.AGENT_MAX_STEPS
        self.max_retries = settings.OPENAI_MAX_RETRIES
        # The SDK retries nothing itself: rate limits and outages are the governor's, shared by every worker.
        # A stopping worker cuts its calls in flight (ticketagent/stopping.py): each item is handed back.
        self.transport = CuttableTransport(limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=100))
        on_process_stop(self.transport.cut)
        self.client = openai.OpenAI(
            api_key=settings.OPENAI_API_KEY,
            base_url=settings.OPENAI_BASE_URL,
            timeout=httpx2.Timeout(settings.OPENAI_TIMEOUT, connect=settings.OPENAI_CONNECT_TIMEOUT),
            max_retries=0,
            http_client=openai.DefaultHttpxClient(transport=self.transport),
        )
        self.governor = governor_for(settings.OPENAI_BASE_URL, settings.OPENAI_MODEL)

    def _create(self, usage: Usage | None, allowance: Allowance | None, **request):
        """One completion, through the governor (ticketagent/governor.py). A 429 makes everyone wait;
        no answer or a 5xx is retried OPENAI_MAX_RETRIES times, then the endpoint is down for everyone until
        a probe gets an answer. Past MODEL_WAIT_SECONDS of waiting: ModelError "unavailable" (the item is
        handed back, not failed). A 4xx other than 429 is raised as the SDK's error. With an `allowance` (a
        task with a budget), the call's bound is reserved first, once for all its retries."""
        o, failures = self._openai, 0
        if allowance is not None:
            allowance.reserve(prompt_tokens=prompt_tokens_bound(request),
                              completion_tokens=request.get("max_completion_tokens", MAX_COMPLETION_TOKENS))
        give_up = time.monotonic() + settings.MODEL_WAIT_SECONDS
        try:
            while True:
                with self.governor.turn(give_up=give_up) as turn:
                    started = time.monotonic()
                    try:
                        raw = self.client.chat.completions.with_raw_response.create(**request)
                    except o.RateLimitError as exc:
                        turn.rate_limited(_retry_after(exc.response))
                        continue
                    except o.APIStatusError as exc:
                        if exc.status_code < 500 and exc.status_code not in (408, 409):
                            turn.answered(exc.response.headers)
                            raise
                        failures = self._failed(turn, failures, f"HTTP {exc.status_code}")
                        continue
                    except o.APIConnectionError as exc:  # timeouts too
                        failures = self._failed(turn, failures, type(exc).__name__)
                        continue
                    completion = raw.parse()
                    tokens = getattr(getattr(completion, "usage", None), "total_tokens", 0) or 0
                    turn.answered(raw.headers, tokens)
                    if usage is not None:
                        usage.add(getattr(completion, "usage", None), time.monotonic() - started,
                                  getattr(completion, "model", "") or self.model)
                    return completion
        except Waited as exc:
            raise ModelError("unavailable", exc.why) from None

    def _failed(self, turn, failures: int, what: str) -> int:
        """No answer, or a 5xx: a quick retry (after 0.5, 1, 2 ... s) up to OPENAI_MAX_RETRIES, then an outage."""
        failures += 1
        if process_stopping():
            raise Waited(f"the worker is stopping ({what})")
        if failures > self.max_retries or turn.probing:
            log.warning("model API %s did not answer (%s): waiting for it", self.governor.endpoint, what)
            turn.unreachable()
        else:
            time.sleep(min(0.5 * 2 ** (failures - 1), 4.0))
        return failures

    def _classify(self, exc: Exception) -> ModelError:
        """What needs a person: a refused request or credentials, an answer that does not fit. (429, 5xx,
        408/409, timeouts and dropped connections never get here: `_create()` waits them out.)"""
        o = self._openai
        if isinstance(exc, (o.AuthenticationError, o.PermissionDeniedError)):
            return ModelError("auth", f"the model API refused the credentials (HTTP {exc.status_code})")
        if isinstance(exc, o.APIStatusError):
            why = server_reason(exc)
            return ModelError("bad_request", f"the model API rejected the request (HTTP {exc.status_code})"
                                             + (f": {why}" if why else ""))
        if isinstance(exc, ValidationError):
            return ModelError("schema", f"the model's answer did not match the schema: {_validation_summary(exc)}")
        if isinstance(exc, ValueError):
            return ModelError("schema", f"the model's answer did not match the schema: {str(exc)[:300]}")
        return ModelError("server", f"{type(exc).__name__}: {str(exc)[:300]}")

    def context(self) -> Context | None:
        """The model's context as its endpoint says (llm/context.py), None where it says none."""
        return context_cached(self.governor.r, self.governor.endpoint,
                              lambda: context_asked(settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY, self.model))

    def _parse(self, messages: list, schema, *, tools: Tools | None = None, usage: Usage | None = None,
               allowance: Allowance | None = None, context: Context | None = None, category: str = ""):
        """One structured answer.

        The request carries the schema's strict `response_format` as it is
        (`response_format()`, built once), and the answer is validated
        against the schema here: what the SDK's `parse()` does, without
        rebuilding the schema on every call. Rate limits, timeouts, dropped
        connections and 5xx are `_create()`'s (the governor's waits and quick
        retries); this loop adds one retry for an answer that does not match the schema, and runs
        the read-only tools the model asks for, their results cut to the room the `context` leaves (the
        ticket's `category`'s articles first); the answer may take the context's answer tokens. A model
        still asking for tools on its AGENT_MAX_STEPS-th turn stops the step with kind "step_limit".
        """
        schema_failures = 0
        turns = 0
        kwargs = {"tools": TOOL_SPECS} if tools is not None else {}
        answer_tokens = context.answer_tokens if context is not None else MAX_COMPLETION_TOKENS
        while True:
            turns += 1
            if context is not None and messages_tokens(messages, kwargs.get("tools")) > context.prompt_tokens:
                raise too_long(messages_tokens(messages, kwargs.get("tools")) + answer_tokens, context)
            try:
                completion = self._create(usage, allowance, model=self.model, messages=messages,
                                          max_completion_tokens=answer_tokens,
                                          extra_body={"response_format": response_format(schema)}, **kwargs)
                if not completion.choices:
                    raise ValueError("the model API returned no choices")
                choice = completion.choices[0]
                if choice.finish_reason == "length":
                    raise ModelError("schema", "the model's answer was cut off (token limit) before it matched "
                                               "the schema")
                if choice.finish_reason == "content_filter":
                    raise ModelError("schema", "the model's answer was stopped by the content filter")
                message = choice.message
                if message.tool_calls:
                    if tools is None:
                        raise ValueError("the model asked for a tool where none is offered")
                    if turns >= self.max_steps:
                        raise ModelError("step_limit", f"step limit: the model still asked for tools after "
                                                       f"{turns} turns (AGENT_MAX_STEPS={self.max_steps})")
                    self._run_tools(messages, message, tools, context=context, category=category)
                    continue
                if message.refusal:
                    raise ValueError(f"the model refused: {message.refusal}")
                if not message.content:
                    raise ValueError("the model returned no structured answer")
                return schema.model_validate_json(message.content)
            except ModelError:
                raise
            except (ValidationError, ValueError) as exc:
                schema_failures += 1
                if schema_failures > 1:
                    raise self._classify(exc) from None
                log.info("model answer did not match %s, asking once more: %s", schema.__name__,
                         self._classify(exc).message)
            except self._openai.OpenAIError as exc:
                raise self._classify(exc) from None

    @staticmethod
    def _run_tools(messages: list, message, tools: Tools, *, context: Context | None = None,
                   category: str = "") -> None:
        """Echo the assistant's tool calls and append each tool's result (within the room `context` leaves).

        Arguments that are not JSON are a schema failure (ValueError), found
        before anything is appended. The echo is built field by field: only
        what a strict server accepts back.
        """
        calls = [c for c in message.tool_calls if getattr(c, "type", "function") == "function"]
        if not calls:
            raise ValueError("the model asked for a kind of tool this agent does not run")
        arguments = []
        for call in calls:
            try:
                arguments.append(json.loads(call.function.arguments or "{}"))
            except ValueError:
                raise ValueError(f"the model's arguments for the tool {call.function.name} are not JSON") from None
        messages.append({"role": "assistant", "content": message.content, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in calls]})
        for call, args in zip(calls, arguments, strict=True):
            result = tools.run(call.function.name, args if isinstance(args, dict) else {})
            room = tool_room(messages, context, TOOL_SPECS)
            content = (json.dumps(result, ensure_ascii=False, default=str) if room is None
                       else results_fit(result, max(0, room), category=category))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content[:8000]})

    def triage(self, ticket, *, playbook: PlaybookSpec | None = None, usage: Usage | None = None,
               allowance: Allowance | None = None):
        spec, context = playbook or standard_spec(), self.context()
        messages = messages_fit([{"role": "system", "content": triage_prompt(spec, ticket)}], ticket, ticket_text,
                                context)
        schema = triage_schema(tuple(c.name for c in spec.categories), spec.extracted_facts())
        return self._parse(messages, schema, usage=usage, allowance=allowance, context=context)

    def draft(self, ticket, triage, tools, *, playbook: PlaybookSpec | None = None, usage: Usage | None = None,
              allowance: Allowance | None = None):
        spec, context = playbook or standard_spec(), self.context()
        messages = messages_fit([{"role": "system", "content": draft_prompt(spec, ticket)}], ticket,
                                lambda t: draft_user(t, triage), context, TOOL_SPECS)
        return one_line_subject(self._parse(messages, Reply, tools=tools, usage=usage, allowance=allowance,
                                            context=context, category=triage.category))

    def decide(self, ticket, triage, reply, *, playbook: PlaybookSpec | None = None, usage: Usage | None = None,
               allowance: Allowance | None = None):
        spec, context = playbook or standard_spec(), self.context()
        messages = messages_fit([{"role": "system", "content": decide_prompt(spec, ticket)}], ticket,
                                lambda t: decide_user(t, triage, reply), context)
        return self._parse(messages, Decision, usage=usage, allowance=allowance, context=context)
