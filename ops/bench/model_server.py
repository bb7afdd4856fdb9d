"""A tiny OpenAI-compatible model server for the benchmarks (standard library only).

    python -m ops.bench.model_server --latency 1.0 [--port 0]

prints one JSON line ``{"port": N}`` on stdout once it listens, then answers
``POST /v1/chat/completions`` with a valid structured answer for the schema
the client asked for (``Triage``, ``Reply`` or ``Decision``, by the
``response_format.json_schema.name`` the OpenAI SDK sends), after sleeping
``--latency`` seconds. It never asks for a tool, so one model step is one
request. ``GET /_bench/counts`` returns how many completions it served.
SIGTERM or SIGINT stops it.

It is deliberately dumb: it stands in for a model whose only property that
matters to the benchmark is its latency.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_CATEGORIES = [
    ("billing", ("refund", "charge", "invoice", "payment")),
    ("account", ("password", "login", "account")),
    ("technical", ("error", "bug", "crash", "down", "outage")),
    ("shipping", ("delivery", "order", "package", "tracking")),
    ("feedback", ("thank", "great")),
]


def _ticket(body: dict) -> dict:
    """The ticket JSON is the first line of the last user message (see ticketagent.llm)."""
    for msg in reversed(body.get("messages") or []):
        if isinstance(msg, dict) and msg.get("role") == "user" and isinstance(msg.get("content"), str):
            try:
                data = json.loads(msg["content"].split("\n", 1)[0])
            except ValueError:
                return {}
            return data if isinstance(data, dict) else {}
    return {}


def answer_for(schema: str, ticket: dict) -> dict:
    subject = str(ticket.get("subject") or "your request")
    text = f"{subject} {ticket.get('body', '')}".lower()
    category = next((c for c, words in _CATEGORIES if any(w in text for w in words)), "other")
    if schema == "Triage":
        return {"category": category, "priority": ticket.get("priority") or "normal", "sentiment": "neutral",
                "language": (ticket.get("language") or "en")[:16], "summary": subject[:200]}
    if schema == "Reply":
        return {"subject": f"Re: {subject}"[:300],
                "body": f"Hello,\n\nthank you for writing about \"{subject}\".\n\nBest regards,\nSupport"}
    if schema == "Decision":
        return {"actions": ["save_draft", "notify_customer", "set_status"], "status": "pending",
                "reason": "answered; waiting for the customer"}
    return {"ok": True}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format, *args):  # noqa: A002 - quiet
        pass

    def _send(self, status: int, payload) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True

    def do_GET(self):  # noqa: N802
        if self.path.rstrip("/") == "/_bench/counts":
            self._send(200, {"completions": self.server.completions, "latency": self.server.latency})
        elif self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send(200, {"object": "list", "data": [{"id": "bench-model", "object": "model"}]})
        else:
            self._send(404, {"error": {"message": "not found", "type": "not_found_error"}})

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?")[0].rstrip("/")
        if path not in ("/v1/chat/completions", "/chat/completions"):
            return self._send(404, {"error": {"message": "not found", "type": "not_found_error"}})
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return self._send(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
        schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("name") or "none"
        if self.server.latency > 0:
            self.server.stopping.wait(self.server.latency)
        with self.server.lock:
            self.server.completions += 1
            n = self.server.completions
        content = json.dumps(answer_for(schema, _ticket(body)))
        self._send(200, {
            "id": f"chatcmpl-bench-{n}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "bench-model"),
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": content, "refusal": None}}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 20, "total_tokens": 60},
        })


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, latency: float):
        super().__init__(address, _Handler)
        self.latency = latency
        self.completions = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=1.0, help="seconds before each answer")
    args = parser.parse_args(argv)
    server = _Server((args.host, args.port), args.latency)

    def stop(signum, frame):
        server.stopping.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    sys.stdout.write(json.dumps({"port": server.server_address[1]}) + "\n")
    sys.stdout.flush()
    server.serve_forever(poll_interval=0.2)
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
