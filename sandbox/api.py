"""The HTTP listener: the helpdesk's JSON write and look-up endpoints, plus the ``/_sandbox/`` controls.

It is the generic REST contract (``Idempotency-Key`` header,
``GET /api/lookup/{key}``) on the standard library's threading HTTP server;
see ``docs/sandbox.md`` for every endpoint and answer.
"""

from __future__ import annotations

import http.server
import json
import re
import select
import socket
import socketserver
import time
from urllib.parse import parse_qs, unquote, urlsplit

from sandbox.endpoints import ENDPOINT_METHODS
from sandbox.faults import reset_on_close
from sandbox.page import CSP, render_index
from sandbox.state import SandboxState
from sandbox.validation import MAX_KEY_LEN, TICKET_RE, ValidationError, validate_write

__all__ = ["MAX_BODY", "SandboxHTTPHandler", "SandboxHTTPServer"]

MAX_BODY = 1024 * 1024  # HTTP request bodies
WRITE_PATH_RE = re.compile(r"^/api/tickets/(.+)/(draft|notify|status|close|escalate)/?$")
LOOKUP_PREFIX = "/api/lookup/"
HELPDESK_PATH = "/api/helpdesk"
STALL_MAX_SECONDS = 120  # a stalled read holds its connection until the client gives up, at most this long


class _BodyTooLarge(Exception):
    pass


class SandboxHTTPHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "TicketSandbox/1.0"
    sys_version = ""
    timeout = 120  # idle keep-alive connections

    @property
    def state(self) -> SandboxState:
        return self.server.state  # type: ignore[attr-defined]

    # -- plumbing ------------------------------------------------------------
    def log_message(self, format, *args):
        self.state.log(f"http {self.address_string()} {format % args}")

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def _read_chunked(self) -> bytes:
        chunks, total = [], 0
        while True:
            size_line = self.rfile.readline(1024)
            if not size_line:
                raise ConnectionError("client closed during chunked body")
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                # trailers until blank line
                while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            total += size
            if total > MAX_BODY:
                raise _BodyTooLarge()
            chunks.append(self.rfile.read(size))
            self.rfile.readline(1024)  # CRLF after chunk

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self._read_chunked()
        length = self.headers.get("Content-Length")
        if not length:
            return b""
        n = int(length)
        if n < 0:
            raise ValueError("negative Content-Length")
        if n > MAX_BODY:
            raise _BodyTooLarge()
        return self.rfile.read(n)

    def _send(self, status: int, body: bytes, content_type: str, headers: dict | None = None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj, headers: dict | None = None):
        body = (json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8")
        self._send(status, body, "application/json; charset=utf-8", headers)

    def _drop(self, what: str) -> None:
        """Accept-then-drop: no HTTP response, connection reset."""
        self.state.log(f"http {self.address_string()} DROP {what} (connection reset)")
        self.close_connection = True
        reset_on_close(self.connection)
        try:
            self.connection.close()
        except OSError:
            pass
        try:
            # socket.close() is deferred while rfile holds a reference;
            # closing rfile performs the real close (and sends the RST) now.
            self.rfile.close()
        except OSError:
            pass

    # -- routing -------------------------------------------------------------
    def _dispatch(self, method: str) -> None:
        split = urlsplit(self.path)
        write = WRITE_PATH_RE.match(split.path)
        try:
            raw = self._read_body()
        except _BodyTooLarge:
            self.close_connection = True
            if write:
                self.state.begin_request(write.group(2))
                self.state.note("rejected")
            self._json(413, {"error": f"request body too large (max {MAX_BODY} bytes)"})
            return
        except (ValueError, ConnectionError):
            self.close_connection = True
            self._json(400, {"error": "could not read request body"})
            return
        try:
            if write:
                self._handle_write(method, unquote(write.group(1)), write.group(2), raw)
            else:
                self._route(method, split.path, split.query, raw)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001  # pragma: no cover - defensive
            self.state.log(f"http internal error: {exc!r}")
            self.close_connection = True
            try:
                self._json(500, {"error": f"internal error: {exc}"})
            except OSError:
                pass

    def _route(self, method: str, path: str, query: str, raw: bytes) -> None:
        """Everything but the write endpoints: look-up, the page, the controls."""
        if path.startswith(LOOKUP_PREFIX):
            self._only(method, "GET") and self._handle_lookup(unquote(path[len(LOOKUP_PREFIX) :]))
        elif path in ("/", "/index.html"):
            self._only(method, "GET") and self._send(
                200, render_index(self.state), "text/html; charset=utf-8", {"Content-Security-Policy": CSP}
            )
        elif path == HELPDESK_PATH:  # which helpdesk this is (ticketagent binds its tasks to it)
            self._only(method, "GET") and self._json(200, {"kind": "sandbox", "instance": self.state.store.instance_id})
        elif path == "/_sandbox/health":
            self._only(method, "GET") and self._json(200, {"ok": True})
        elif path == "/_sandbox/counts":
            self._only(method, "GET") and self._json(200, self.state.counts())
        elif path == "/_sandbox/deliveries":
            self._only(method, "GET") and self._handle_deliveries(query)
        elif path == "/_sandbox/faults":
            self._handle_faults(method, raw)
        elif path == "/_sandbox/reset":
            if self._only(method, "POST"):
                self.state.reset()
                self._json(200, {"ok": True, "faults": self.state.faults.snapshot()})
        else:
            self._json(404, {"error": f"no such endpoint: {path}"})

    def _only(self, method: str, *allowed: str) -> bool:
        if method in allowed:
            return True
        self._json(405, {"error": f"method {method} not allowed"}, {"Allow": ", ".join(allowed)})
        return False

    # -- write endpoints -----------------------------------------------------
    def _handle_write(self, method: str, ticket: str, endpoint: str, raw: bytes) -> None:
        state = self.state
        generation = state.generation
        latency = state.begin_request(endpoint)
        expected = ENDPOINT_METHODS[endpoint]
        if method != expected:
            state.note("rejected")
            self._json(405, {"error": f"{endpoint} requires {expected}"}, {"Allow": expected})
            return
        if latency > 0:
            time.sleep(latency)
            if state.outdated(generation, f"http {endpoint} {ticket}"):
                self._json(503, {"error": "the sandbox was reset while this request waited: nothing recorded"},
                           {"Retry-After": "0"})
                return
        error_status = state.take_error(endpoint)
        if error_status is not None:
            state.log(f"http {endpoint} {ticket}: injected error {error_status}")
            self._json(error_status, {"error": f"injected fault: {endpoint} unavailable"}, {"Retry-After": "0"})
            return
        key = (self.headers.get("Idempotency-Key") or "").strip()
        payload = self._validated(endpoint, ticket, key, raw)
        if payload is None:
            return
        delivery, replayed = state.record(key=key, method=method, endpoint=endpoint, ticket=ticket, payload=payload)
        state.log(f"http {endpoint} {ticket} key={key!r} -> {delivery['id']}" + (" (replayed)" if replayed else ""))
        if state.take_drop(endpoint):
            self._drop(f"{endpoint} {delivery['id']}")
            return
        self._json(200 if replayed else 201, {"id": delivery["id"], "key": key, "replayed": replayed})

    def _validated(self, endpoint: str, ticket: str, key: str, raw: bytes) -> dict | None:
        """The payload to record, or ``None`` once a 422 has been answered."""
        try:
            if len(key) > MAX_KEY_LEN:
                raise ValidationError(f"Idempotency-Key too long (max {MAX_KEY_LEN})")
            if not TICKET_RE.match(ticket):
                raise ValidationError(f"invalid ticket id: {ticket!r}")
            return validate_write(endpoint, raw)
        except ValidationError as exc:
            error = str(exc)
        except UnicodeDecodeError:
            error = "request body is not valid UTF-8"
        self.state.note("rejected")
        self._json(422, {"error": error})
        return None

    # -- read / control endpoints --------------------------------------------
    def _handle_lookup(self, key: str) -> None:
        if self._read_fault("lookup"):
            return
        rows = self.state.store.deliveries(key=key) if key else []
        if not rows:
            self._json(404, {"found": False})
            return
        self._json(200, {"found": True, "count": len(rows), "id": rows[0]["id"], "deliveries": rows})

    def _read_fault(self, what: str) -> bool:
        """A read fault fired (an error answered, the connection dropped or stalled): True."""
        fault = self.state.take_read()
        if fault is None:
            return False
        if fault == "error":
            status = self.state.faults.snapshot()["error_status"]
            self.state.log(f"http {what}: injected read error {status}")
            self._json(status, {"error": f"injected fault: {what} unavailable"}, {"Retry-After": "0"})
        elif fault == "drop":
            self._drop(what)
        else:
            self._stall(what)
        return True

    def _stall(self, what: str) -> None:
        """No answer: hold the connection until the client closes it (its read timed out)."""
        self.state.log(f"http {self.address_string()} STALL {what}")
        self.close_connection = True
        try:
            select.select([self.connection], [], [], STALL_MAX_SECONDS)
        except (OSError, ValueError):
            pass

    def _handle_deliveries(self, query: str) -> None:
        params = parse_qs(query, keep_blank_values=True)

        def one(name):
            values = params.get(name)
            return values[-1] if values else None

        limit = one("limit")
        try:
            limit_n = int(limit) if limit not in (None, "") else None
        except ValueError:
            self._json(422, {"error": "limit must be an integer"})
            return
        rows = self.state.store.deliveries(
            key=one("key"), endpoint=one("endpoint"), ticket=one("ticket"), limit=limit_n
        )
        self._json(200, rows)

    def _handle_faults(self, method: str, raw: bytes) -> None:
        if method == "GET":
            self._json(200, self.state.faults.snapshot())
        elif method == "DELETE":
            self._json(200, self.state.faults.clear())
        elif method == "POST":
            try:
                body = json.loads(raw.decode("utf-8") or "{}")
                self._json(200, self.state.set_faults(body))
            except (ValueError, ValidationError) as exc:
                self._json(422, {"error": str(exc)})
        else:
            self._only(method, "GET", "POST", "DELETE")


class SandboxHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    block_on_close = False

    def __init__(self, address, state: SandboxState):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.state = state
        super().__init__(address, SandboxHTTPHandler)

    def server_bind(self):
        # Skip HTTPServer.server_bind's getfqdn() (a DNS lookup).
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = host
        self.server_port = port
