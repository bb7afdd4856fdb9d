"""The fake model: a real OpenAI-compatible HTTP server (standard library only), for the tests and the bench.


In a thread of the test process (`FakeOpenAIServer().start()`), the
in-process `OpenAIModel` *and* real `manage.py worker` subprocesses reach it
over a real socket (the official SDK uses httpx2, which respx cannot
intercept). As a process of its own for the bench,

    python -m ops.fake_model --latency 0.33 [--spread 0.25] [--port 0] [--api-key KEY] [--rpm 600]

prints one JSON line `{"port": N}` once it listens, answers every completion
`--latency` seconds after it arrived (a model of that speed, its own work
included; with `--spread S`, each answer's time is drawn evenly from
latency x (1 - S) to latency x (1 + S), the same mean, as a real model's
varies; no key checked unless given; with `--rpm`, a 429 past that many
requests in a wall-clock minute, OpenAI's `x-ratelimit-*` headers on every
answer), `GET /_bench/counts` says how many it served and refused; SIGTERM
stops it.

    server = FakeOpenAIServer().start()      # or the `openai_server` fixture
    server.mode = "valid"                    # the default behaviour
    server.script(["429", "valid"])          # the next requests, in order; then the default
    server.usage = (3000, 3000)              # the tokens every answer reports (default 42 prompt + 17 completion)
    server.calls, server.by_behaviour, server.by_schema
    server.stop()

Over HTTP (for tests that drive worker processes):

    GET  /_fake/counts   -> {"total", "by_behaviour", "by_schema", "mode", "queue", ...}
    POST /_fake/mode     {"mode": "500", "script": ["valid"], "reset": false, "retry_after": "0"}
    POST /_fake/reset

`POST /v1/chat/completions` (and `/chat/completions`) answers with the
behaviour taken from the script queue, else the default mode:

    valid         JSON fitting the requested json_schema (Triage / Reply / Decision, chosen by the
                  schema name the SDK sends), derived deterministically from the ticket
    invalid       JSON that violates the schema
    over_limits   the right fields and types, but strings and lists longer than the models allow
                  (limits the portable schema does not send, checked after parsing)
    garbage       content that is not JSON at all
    refusal       a structured-output refusal
    length        JSON cut off where the token limit ended it (finish_reason "length")
    content_filter  no content: the answer was stopped by the content filter (finish_reason "content_filter")
    inject        valid JSON that tries everything the schema allows: every allowed action, status
                  "solved", text naming attacker@evil.example and other tickets
    inject_extra  like inject, plus fields the schema forbids (`to`, `ticket`, an unknown action)
    tool_call     asks for the knowledge_base tool (if tools are offered and none was answered yet),
                  else answers valid; "tool_call:customer_tickets" / "tool_call:both" pick the tool
    loop          always asks for a tool call
    bad_tool_arguments  asks for the knowledge_base tool with arguments that are not JSON
    slow          waits `slow_seconds` (longer than the client timeout), then answers valid
    drop          closes the connection without an answer
    429           rate limited, with `retry-after: <retry_after>` (default "0")
    500, 503, 400, 401, ...   that HTTP error with an OpenAI-style error body

With `n_ctx` set (`configure(n_ctx=2048)`), as llama-server with that
context: `GET /props` says it (unless `props=False`), and a request whose
prompt takes n_ctx tokens or more (a quarter of its messages' bytes) is
refused with llama-server's HTTP 400 "request (N tokens) exceeds the
available context size (n_ctx tokens)" (counted as behaviour "400").

Requests are also checked the way a strict server would: unknown keys in
messages or tool calls, tool results without a matching call, non-strict
tools, or a json_schema outside the strict subset (an object without every
property required or without `additionalProperties: false`; `default`,
`minLength`, `maxLength`, `minItems` or `maxItems` anywhere) are answered with
400 (counted as behaviour "rejected").
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ops.fake_model.answers import (
    asked_categories,
    category,
    check_request,
    error_body,
    inject_answer,
    invalid_answer,
    over_limits_answer,
    schema_name,
    ticket_of,
    tool_results,
    valid_answer,
)

BEHAVIOURS = ("valid", "invalid", "over_limits", "garbage", "refusal", "length", "content_filter", "inject",
              "inject_extra", "tool_call", "loop", "bad_tool_arguments", "slow", "drop", "429", "500", "503", "400",
              "401")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once: no 40 ms delayed-ACK stalls
    server: _HTTPServer

    def log_message(self, format, *args):  # noqa: A002 - silence the default stderr log
        pass

    # -- plumbing ----------------------------------------------------------------
    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return None

    def _send(self, status: int, payload: Any, headers: dict | None = None) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:  # the client gave up (timeout): nothing to answer
            self.close_connection = True

    # -- routes --------------------------------------------------------------------
    def do_GET(self):  # noqa: N802
        fake = self.server.fake
        if self.path.rstrip("/") == "/_fake/counts":
            self._send(200, fake.counts())
        elif self.path.rstrip("/") == "/_bench/counts":
            self._send(200, {"completions": fake.calls, "latency": fake.latency,
                             "rate_limited": fake.by_behaviour["429"]})
        elif self.path.rstrip("/") == "/props" and fake.n_ctx and fake.props:
            self._send(200, {"default_generation_settings": {"n_ctx": fake.n_ctx, "params": {"n_predict": -1}},
                             "total_slots": 1, "model_alias": "fake-model"})
        elif self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found_error"}})

    def do_POST(self):  # noqa: N802
        fake = self.server.fake
        path = self.path.split("?")[0].rstrip("/")
        body = self._body()
        self.arrived = time.monotonic()  # the request is in: the model's latency counts from here
        if path == "/_fake/mode":
            fake.configure(**(body or {}))
            self._send(200, fake.counts())
        elif path == "/_fake/reset":
            fake.reset()
            self._send(200, fake.counts())
        elif path in ("/v1/chat/completions", "/chat/completions"):
            self._completion(body)
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found_error"}})

    def _completion(self, body):
        fake = self.server.fake
        if self.headers.get("Authorization", "") != f"Bearer {fake.api_key}" and fake.api_key:
            fake.record(body, "401")
            return self._send(401, error_body(401, "Incorrect API key provided"))
        limited = fake.over_rpm()
        if limited is not None:  # an API's requests-per-minute limit: 429 with when to come back, as OpenAI's
            fake.record(body, "429")
            return self._send(429, error_body(429, "Rate limit reached for requests"), limited)
        problem = check_request(body)
        behaviour = "rejected" if problem else fake.next_behaviour()
        if behaviour == "tool_call" or behaviour.startswith("tool_call:"):
            if not body.get("tools") or tool_results(body):
                behaviour_recorded = "valid"
            else:
                behaviour_recorded = "tool_call"
        else:
            behaviour_recorded = behaviour.split(":")[0]
        fake.record(body, behaviour_recorded)
        if problem:
            return self._send(400, error_body(400, problem))
        if fake.n_ctx and prompt_tokens(body) >= fake.n_ctx:  # llama-server's words and body
            fake.record(body, "400")
            return self._send(400, {"error": {
                "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": prompt_tokens(body),
                "n_ctx": fake.n_ctx, "message": f"request ({prompt_tokens(body)} tokens) exceeds the available "
                                                f"context size ({fake.n_ctx} tokens), try increasing it"}})
        if behaviour.isdigit():
            status = int(behaviour)
            headers = {"retry-after": fake.retry_after} if status == 429 else {}
            return self._send(status, error_body(status, f"fake {status}"), headers)
        if behaviour == "drop":
            self.close_connection = True
            return
        if behaviour == "slow":
            fake.stopping.wait(fake.slow_seconds)
            behaviour = "valid"
        answer = fake.completion(body, behaviour)
        if fake.latency > 0:  # answered `latency` after the request arrived, its own work included
            fake.stopping.wait(max(0.0, self.arrived + fake.latency_drawn() - time.monotonic()))
        self._send(200, answer, fake.rpm_headers())


def prompt_tokens(body: dict) -> int:
    """A request's prompt tokens as the fake counts them: a quarter of its messages' and tools' bytes."""
    return len(json.dumps([body.get("messages"), body.get("tools")], ensure_ascii=False).encode()) // 4


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    fake: FakeOpenAIServer


class FakeOpenAIServer:
    """See the module docstring. Thread-safe; counters are plain attributes."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, api_key: str = "sk-test-fake-key",
                 slow_seconds: float = 2.5, latency: float = 0.0, spread: float = 0.0, rpm: int = 0, seed: int = 7):
        self.host, self.port = host, port
        self.latency = latency  # seconds before every answer: a model of that speed (the bench)
        self.spread = spread  # each answer's latency drawn from latency x (1 ± spread), the same mean
        self._random = random.Random(seed)
        self.rpm = rpm  # requests per wall-clock minute before 429s (0: no limit)
        self._minute = [0, 0]
        self.api_key = api_key
        self.slow_seconds = slow_seconds
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.reset()

    def latency_drawn(self) -> float:
        """This answer's latency: `latency`, or with `spread` one drawn evenly around it."""
        if not self.spread:
            return self.latency
        with self._lock:
            return self.latency * (1 + self._random.uniform(-self.spread, self.spread))

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> FakeOpenAIServer:
        self._httpd = _HTTPServer((self.host, self.port), _Handler)
        self._httpd.fake = self
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"fake-openai-{self.port}", daemon=True)
        self._thread.start()
        return self

    def serve(self) -> None:
        """Serve in this thread until `stop()` (from another thread or a signal handler)."""
        self._httpd = _HTTPServer((self.host, self.port), _Handler)
        self._httpd.fake = self
        self.port = self._httpd.server_address[1]
        sys.stdout.write(json.dumps({"port": self.port}) + "\n")
        sys.stdout.flush()
        self._httpd.serve_forever(poll_interval=0.2)
        self._httpd.server_close()

    def stop(self) -> None:
        self.stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """What OPENAI_BASE_URL should be."""
        return f"{self.url}/v1"

    # -- scripting -------------------------------------------------------------------
    def reset(self) -> None:
        with getattr(self, "_lock", threading.Lock()):
            self.mode = "valid"
            self.queue: collections.deque[str] = collections.deque()
            self.retry_after = "0"
            self.refusal_text = "I can't help with that."
            self.answers: dict[str, Any] = {}
            self.usage: tuple[int, int] | None = None  # (prompt, completion) tokens every answer reports; None: 42, 17
            self.calls = 0
            self.by_behaviour: collections.Counter[str] = collections.Counter()
            self.by_schema: collections.Counter[str] = collections.Counter()
            self.requests: list[dict] = []
            self.keep_requests = getattr(self, "keep_requests", True)
            # as llama-server: a context of n_ctx tokens (0: none), said at GET /props when `props`, and a
            # prompt of more tokens (counted as a quarter of its messages' bytes) refused with its HTTP 400
            self.n_ctx = 0
            self.props = True

    def script(self, behaviours: list[str]) -> None:
        """Queue behaviours for the next requests (after those already queued)."""
        with self._lock:
            self.queue.extend(behaviours)

    def configure(self, *, mode: str | None = None, script: list[str] | None = None, reset: bool = False,
                  retry_after: str | None = None, answers: dict | None = None, refusal_text: str | None = None,
                  n_ctx: int | None = None, props: bool | None = None, **_ignored) -> None:
        if reset:
            self.reset()
        with self._lock:
            if mode is not None:
                self.mode = mode
            if script is not None:
                self.queue = collections.deque(script)
            if retry_after is not None:
                self.retry_after = str(retry_after)
            if answers is not None:
                self.answers.update(answers)
            if refusal_text is not None:
                self.refusal_text = refusal_text
            if n_ctx is not None:
                self.n_ctx = n_ctx
            if props is not None:
                self.props = props

    def over_rpm(self) -> dict | None:
        """With `rpm`: count this request in its (wall-clock) minute; the headers of a 429 when the minute's
        requests are spent, else None."""
        if not self.rpm:
            return None
        minute = int(time.time() // 60)
        with self._lock:
            if self._minute[0] != minute:
                self._minute = [minute, 0]
            spent = self._minute[1] >= self.rpm
            if not spent:
                self._minute[1] += 1
        if spent:  # (the headers take the lock themselves)
            return {**self.rpm_headers(), "retry-after": f"{60 * (minute + 1) - time.time():.3f}"}
        return None

    def rpm_headers(self) -> dict:
        """OpenAI's x-ratelimit-* headers for the requests per minute (none without `rpm`)."""
        if not self.rpm:
            return {}
        now = time.time()
        with self._lock:
            used = self._minute[1] if self._minute[0] == int(now // 60) else 0
        return {"x-ratelimit-limit-requests": str(self.rpm), "x-ratelimit-remaining-requests":
                str(max(0, self.rpm - used)), "x-ratelimit-reset-requests": f"{60 - now % 60:.3f}s"}

    def next_behaviour(self) -> str:
        with self._lock:
            return self.queue.popleft() if self.queue else self.mode

    def record(self, body, behaviour: str) -> None:
        body = body if isinstance(body, dict) else {}
        schema = schema_name(body)
        with self._lock:
            self.calls += 1
            self.by_behaviour[behaviour] += 1
            self.by_schema[schema] += 1
            if not self.keep_requests:
                return
            self.requests.append({"at": time.monotonic(), "behaviour": behaviour, "schema": schema,
                                  "ticket_id": ticket_of(body).get("ticket_id"),
                                  "tools": [t["function"]["name"] for t in body.get("tools") or []
                                            if isinstance(t, dict) and "function" in t],
                                  "tool_results": tool_results(body), "body": body})

    def counts(self) -> dict:
        with self._lock:
            by_schema_behaviour = collections.Counter(f"{r['schema']}:{r['behaviour']}" for r in self.requests)
            return {"total": self.calls, "by_behaviour": dict(self.by_behaviour), "by_schema": dict(self.by_schema),
                    "by_schema_behaviour": dict(by_schema_behaviour), "mode": self.mode, "queue": list(self.queue),
                    "port": self.port}

    def calls_for(self, schema: str, behaviour: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self.requests if r["schema"] == schema
                       and (behaviour is None or r["behaviour"] == behaviour))

    # -- answers ---------------------------------------------------------------------
    def completion(self, body: dict, behaviour: str) -> dict:
        schema = schema_name(body)
        ticket = ticket_of(body)
        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
        finish = "stop"
        if behaviour in ("tool_call", "loop") or behaviour.startswith("tool_call:"):
            if behaviour == "loop" or (body.get("tools") and not tool_results(body)):
                which = behaviour.partition(":")[2] or "knowledge_base"
                names = ["knowledge_base", "customer_tickets"] if which == "both" else [which]
                n = len(self.requests)
                message["tool_calls"] = [{
                    "id": f"call_fake_{n}_{i}", "type": "function",
                    "function": {"name": name, "arguments": json.dumps(
                        {"query": category(ticket)} if name == "knowledge_base" else {})},
                } for i, name in enumerate(names)]
                finish = "tool_calls"
            else:
                message["content"] = json.dumps(self._valid(schema, ticket, body))
        elif behaviour == "bad_tool_arguments":
            message["tool_calls"] = [{"id": f"call_fake_{len(self.requests)}_0", "type": "function",
                                      "function": {"name": "knowledge_base", "arguments": '{"query": "bill'}}]
            finish = "tool_calls"
        elif behaviour == "refusal":
            message["refusal"] = self.refusal_text
        elif behaviour == "length":
            message["content"] = json.dumps(self._valid(schema, ticket, body))[:12]
            finish = "length"
        elif behaviour == "content_filter":
            finish = "content_filter"
        elif behaviour == "garbage":
            message["content"] = "Sure! Here is the answer you asked for: category billing, probably."
        elif behaviour == "invalid":
            message["content"] = json.dumps(invalid_answer(schema))
        elif behaviour == "over_limits":
            message["content"] = json.dumps(over_limits_answer(schema))
        elif behaviour in ("inject", "inject_extra"):
            message["content"] = json.dumps(inject_answer(schema, ticket, body, extra=behaviour == "inject_extra"))
        else:
            message["content"] = json.dumps(self._valid(schema, ticket, body))
        prompt, completion = self.usage or (42, 17)
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        return {"id": f"chatcmpl-fake-{self.calls}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "fake-model"), "system_fingerprint": "fp_fake",
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "usage": usage}

    def _valid(self, schema: str, ticket: dict, body: dict) -> dict:
        custom = self.answers.get(schema)
        if callable(custom):
            return custom(ticket, body)
        if custom is not None:
            return custom
        return valid_answer(schema, ticket, tool_results(body), categories=asked_categories(body))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.fake_model", description="The fake model, as a process.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=1.0, help="seconds from a request to its answer")
    parser.add_argument("--spread", type=float, default=0.0,
                        help="each answer's latency drawn evenly from latency x (1 - S) to x (1 + S) (default: 0)")
    parser.add_argument("--api-key", default="", help="the key clients must send (default: none checked)")
    parser.add_argument("--rpm", type=int, default=0, help="requests per minute before 429s (default: no limit)")
    args = parser.parse_args(argv)
    fake = FakeOpenAIServer(host=args.host, port=args.port, api_key=args.api_key, latency=args.latency,
                            spread=args.spread, rpm=args.rpm)
    fake.keep_requests = False  # a long run: count, do not keep every request

    def stop(signum, frame):
        fake.stopping.set()
        threading.Thread(target=fake._httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    fake.serve()
    return 0
