"""Sandbox helpdesk + mail server.

A small, separate process that plays the customer's helpdesk (JSON REST API
over HTTP) and mail server (SMTP).  Every effect it accepts is recorded as a
*delivery* row in SQLite; counting deliveries is how the test-suite and the
kill test prove that "nothing happened twice", so the bookkeeping is exact,
committed durably before any answer is sent, and safe under concurrent
clients.

Standard library only.  See ``docs/sandbox.md`` for the full API.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import email.policy
import html
import http.server
import json
import os
import random
import re
import signal
import socket
import socketserver
import sqlite3
import struct
import sys
import threading
import time
from email.parser import BytesParser
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = [
    "ENDPOINTS",
    "WRITE_ENDPOINTS",
    "SandboxServer",
    "SandboxState",
    "Store",
    "key_from_message_id",
    "main",
    "serve",
]

# --------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------

#: HTTP write endpoints and the method each one accepts.
ENDPOINT_METHODS = {
    "draft": "PUT",
    "notify": "POST",
    "status": "POST",
    "close": "POST",
    "escalate": "POST",
}
WRITE_ENDPOINTS = tuple(ENDPOINT_METHODS)
#: All endpoint names usable in faults and counts.
ENDPOINTS = WRITE_ENDPOINTS + ("email",)
#: Wildcard endpoint name accepted in the per-endpoint fault maps.
ANY_ENDPOINT = "*"

STATUSES = ("open", "pending", "solved", "escalated", "on_hold")
TICKET_RE = re.compile(r"^[A-Za-z0-9._:/#-]{1,200}$")
EMAIL_RE = re.compile(
    r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*$"
)
MAX_KEY_LEN = 255
MAX_BODY = 1024 * 1024  # HTTP request bodies
MAX_SMTP_MESSAGE = 32 * 1024 * 1024
MAX_SMTP_COMMAND = 4096
MAX_SMTP_LINE = 1024 * 1024
SMTP_HOSTNAME = "sandbox.helpdesk.test"
HTML_LIMIT = 200

WRITE_PATH_RE = re.compile(
    r"^/api/tickets/(.+)/(draft|notify|status|close|escalate)/?$"
)
LOOKUP_PREFIX = "/api/lookup/"

_log_lock = threading.Lock()


def _utcnow() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds")


def _log(quiet: bool, message: str) -> None:
    if quiet:
        return
    line = f"[sandbox {time.strftime('%H:%M:%S')}] {message}\n"
    with _log_lock:
        try:
            sys.stderr.write(line)
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


class ValidationError(Exception):
    """A request was malformed; answered with 422 and nothing recorded."""


def key_from_message_id(message_id: str | None) -> str:
    """Idempotency key of an email: ``<KEY@domain>`` -> ``KEY``.

    Angle brackets are stripped, then the domain (everything after the last
    ``@``) if there is one.  No Message-ID -> empty key.
    """
    value = (message_id or "").strip()
    if value.startswith("<") and value.endswith(">"):
        value = value[1:-1].strip()
    else:
        value = value.strip("<>").strip()
    if "@" in value:
        value = value.rsplit("@", 1)[0]
    return value


# --------------------------------------------------------------------------
# Storage
# --------------------------------------------------------------------------


class Store:
    """Delivery rows in SQLite, serialised by a lock.

    Each write runs in a ``BEGIN IMMEDIATE`` transaction (the dedupe check and
    the insert are atomic, even against another process sharing the file) and
    is committed with ``synchronous=FULL`` before the caller answers.
    Delivery ids (``dlv-<n>``) are never reused, not even after ``reset``.
    """

    def __init__(self, path: str | None = None):
        self.path = path or ":memory:"
        if self.path != ":memory:":
            parent = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(parent, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=30
        )
        self._conn.row_factory = sqlite3.Row
        with self._lock:
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute(
                """
                CREATE TABLE IF NOT EXISTS deliveries (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    key TEXT NOT NULL DEFAULT '',
                    method TEXT NOT NULL,
                    endpoint TEXT NOT NULL,
                    ticket TEXT NOT NULL DEFAULT '',
                    payload TEXT NOT NULL,
                    created_at TEXT NOT NULL
                )
                """
            )
            self._conn.execute(
                "CREATE INDEX IF NOT EXISTS deliveries_key ON deliveries (key)"
            )

    @staticmethod
    def _row(row: sqlite3.Row) -> dict:
        try:
            payload = json.loads(row["payload"])
        except ValueError:
            payload = row["payload"]
        return {
            "id": f"dlv-{row['seq']}",
            "key": row["key"],
            "method": row["method"],
            "endpoint": row["endpoint"],
            "ticket": row["ticket"],
            "payload": payload,
            "created_at": row["created_at"],
        }

    def record(
        self,
        *,
        key: str,
        method: str,
        endpoint: str,
        ticket: str,
        payload,
        honor_keys: bool,
    ) -> tuple[dict, bool]:
        """Record one delivery; returns ``(delivery, replayed)``.

        With ``honor_keys`` and a non-empty key that already has a delivery,
        nothing is written and the first existing delivery is returned with
        ``replayed=True``.
        """
        payload_text = json.dumps(payload, ensure_ascii=False, sort_keys=True)
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                if honor_keys and key:
                    row = conn.execute(
                        "SELECT * FROM deliveries WHERE key = ? ORDER BY seq LIMIT 1",
                        (key,),
                    ).fetchone()
                    if row is not None:
                        conn.execute("COMMIT")
                        return self._row(row), True
                cur = conn.execute(
                    "INSERT INTO deliveries (key, method, endpoint, ticket, payload, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (key, method, endpoint, ticket, payload_text, _utcnow()),
                )
                seq = cur.lastrowid
                row = conn.execute(
                    "SELECT * FROM deliveries WHERE seq = ?", (seq,)
                ).fetchone()
                conn.execute("COMMIT")
            except BaseException:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise
        return self._row(row), False

    def deliveries(
        self,
        *,
        key: str | None = None,
        endpoint: str | None = None,
        ticket: str | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[dict]:
        where, args = [], []
        for column, value in (("key", key), ("endpoint", endpoint), ("ticket", ticket)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        sql = "SELECT * FROM deliveries"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq " + ("DESC" if newest_first else "ASC")
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        with self._lock:
            rows = self._conn.execute(sql, args).fetchall()
        return [self._row(r) for r in rows]

    def counts(self) -> dict:
        with self._lock:
            total = self._conn.execute("SELECT COUNT(*) FROM deliveries").fetchone()[0]
            by_endpoint = dict(
                self._conn.execute(
                    "SELECT endpoint, COUNT(*) FROM deliveries GROUP BY endpoint"
                ).fetchall()
            )
            by_key = dict(
                self._conn.execute(
                    "SELECT key, COUNT(*) FROM deliveries WHERE key != ''"
                    " GROUP BY key ORDER BY MIN(seq)"
                ).fetchall()
            )
        endpoints = {name: 0 for name in ENDPOINTS}
        endpoints.update(by_endpoint)
        return {
            "deliveries": total,
            "by_endpoint": endpoints,
            "by_key": by_key,
            "duplicates": sum(1 for n in by_key.values() if n > 1),
        }

    def reset(self) -> None:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute("DELETE FROM deliveries")
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def close(self) -> None:
        with self._lock:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass


# --------------------------------------------------------------------------
# Shared state: faults + request statistics
# --------------------------------------------------------------------------


def _default_faults(honor_keys: bool) -> dict:
    return {
        "latency_ms": 0,
        "error_rate": {},
        "error_status": 503,
        "drop_rate": {},
        "error_next": {},
        "drop_next": {},
        "honor_keys": honor_keys,
        "seed": None,
    }


def _default_stats() -> dict:
    return {
        "requests": 0,
        "requests_by_endpoint": {name: 0 for name in ENDPOINTS},
        "rejected": 0,
        "errors_injected": 0,
        "drops": 0,
        "replays": 0,
    }


class SandboxState:
    """Store + faults + in-memory request statistics (shared by HTTP/SMTP)."""

    def __init__(
        self, db: str | None = None, honor_keys: bool = True, quiet: bool = False
    ):
        self.store = Store(db)
        self.default_honor_keys = bool(honor_keys)
        self.quiet = quiet
        self._lock = threading.Lock()
        self._faults = _default_faults(self.default_honor_keys)
        self._stats = _default_stats()
        self._rng = random.Random()

    # -- logging -----------------------------------------------------------
    def log(self, message: str) -> None:
        _log(self.quiet, message)

    # -- faults ------------------------------------------------------------
    @property
    def honor_keys(self) -> bool:
        with self._lock:
            return self._faults["honor_keys"]

    def faults(self) -> dict:
        with self._lock:
            return json.loads(json.dumps(self._faults))

    def set_faults(self, body) -> dict:
        """Validate then merge ``body`` into the current faults (atomically)."""
        if not isinstance(body, dict):
            raise ValidationError("faults body must be a JSON object")
        allowed = set(_default_faults(True))
        unknown = sorted(set(body) - allowed)
        if unknown:
            raise ValidationError(f"unknown fault(s): {', '.join(unknown)}")

        def is_int(v):
            return isinstance(v, int) and not isinstance(v, bool)

        def is_num(v):
            return isinstance(v, (int, float)) and not isinstance(v, bool)

        def endpoint_map(name, check, what):
            value = body[name]
            if not isinstance(value, dict):
                raise ValidationError(f"{name} must be an object {{endpoint: {what}}}")
            for ep, v in value.items():
                if ep not in ENDPOINTS and ep != ANY_ENDPOINT:
                    raise ValidationError(
                        f"{name}: unknown endpoint {ep!r} (use one of {', '.join(ENDPOINTS)} or '*')"
                    )
                if not check(v):
                    raise ValidationError(f"{name}[{ep!r}] must be {what}")
            return value

        updates = {}
        if "latency_ms" in body:
            v = body["latency_ms"]
            if not is_int(v) or not 0 <= v <= 600_000:
                raise ValidationError("latency_ms must be an integer 0..600000")
            updates["latency_ms"] = v
        if "error_status" in body:
            v = body["error_status"]
            if not is_int(v) or not 400 <= v <= 599:
                raise ValidationError("error_status must be an integer 400..599")
            updates["error_status"] = v
        if "honor_keys" in body:
            if not isinstance(body["honor_keys"], bool):
                raise ValidationError("honor_keys must be a boolean")
            updates["honor_keys"] = body["honor_keys"]
        if "seed" in body:
            v = body["seed"]
            if v is not None and not is_int(v):
                raise ValidationError("seed must be an integer or null")
            updates["seed"] = v
        maps = {}
        for name in ("error_rate", "drop_rate"):
            if name in body:
                maps[name] = endpoint_map(
                    name, lambda v: is_num(v) and 0 <= v <= 1, "a number 0..1"
                )
        for name in ("error_next", "drop_next"):
            if name in body:
                maps[name] = endpoint_map(
                    name, lambda v: is_int(v) and v >= 0, "an integer >= 0"
                )

        with self._lock:
            self._faults.update(updates)
            for name, value in maps.items():
                current = self._faults[name]
                for ep, v in value.items():
                    if v:
                        current[ep] = v
                    else:
                        current.pop(ep, None)
            if "seed" in updates and updates["seed"] is not None:
                self._rng.seed(updates["seed"])
            result = json.loads(json.dumps(self._faults))
        self.log(f"faults set: {json.dumps(body, sort_keys=True)}")
        return result

    def clear_faults(self) -> dict:
        with self._lock:
            self._faults = _default_faults(self.default_honor_keys)
            self._rng = random.Random()
            return json.loads(json.dumps(self._faults))

    def reset(self) -> None:
        self.store.reset()
        with self._lock:
            self._faults = _default_faults(self.default_honor_keys)
            self._rng = random.Random()
            self._stats = _default_stats()
        self.log("reset: deliveries, faults and stats cleared")

    # -- per-request fault decisions ---------------------------------------
    def begin_request(self, endpoint: str) -> float:
        """Count one write request; returns the latency to apply (seconds)."""
        with self._lock:
            self._stats["requests"] += 1
            by = self._stats["requests_by_endpoint"]
            by[endpoint] = by.get(endpoint, 0) + 1
            return self._faults["latency_ms"] / 1000.0

    def _take(self, next_name: str, rate_name: str, endpoint: str) -> bool:
        # caller holds self._lock
        pending = self._faults[next_name]
        for ep in (endpoint, ANY_ENDPOINT):
            n = pending.get(ep, 0)
            if n > 0:
                if n == 1:
                    del pending[ep]
                else:
                    pending[ep] = n - 1
                return True
        rates = self._faults[rate_name]
        rate = rates.get(endpoint, rates.get(ANY_ENDPOINT, 0))
        return bool(rate) and self._rng.random() < rate

    def take_error(self, endpoint: str) -> int | None:
        """Status to answer with if an error fault fires, else ``None``."""
        with self._lock:
            if self._take("error_next", "error_rate", endpoint):
                self._stats["errors_injected"] += 1
                return self._faults["error_status"]
        return None

    def take_drop(self, endpoint: str) -> bool:
        with self._lock:
            if self._take("drop_next", "drop_rate", endpoint):
                self._stats["drops"] += 1
                return True
        return False

    def note(self, stat: str) -> None:
        with self._lock:
            self._stats[stat] += 1

    # -- reporting ---------------------------------------------------------
    def counts(self) -> dict:
        result = self.store.counts()
        with self._lock:
            stats = json.loads(json.dumps(self._stats))
            honor = self._faults["honor_keys"]
        result.update(stats)
        result["honor_keys"] = honor
        return result

    def record(self, **kwargs) -> tuple[dict, bool]:
        delivery, replayed = self.store.record(honor_keys=self.honor_keys, **kwargs)
        if replayed:
            self.note("replays")
        return delivery, replayed


# --------------------------------------------------------------------------
# Request validation
# --------------------------------------------------------------------------


def _require_str(
    body: dict, field: str, *, optional: bool = False, max_len: int = 100_000
):
    if field not in body or body[field] is None:
        if optional:
            return None
        raise ValidationError(f"missing field: {field}")
    value = body[field]
    if not isinstance(value, str):
        raise ValidationError(f"field {field!r} must be a string")
    if len(value) > max_len:
        raise ValidationError(f"field {field!r} is too long (max {max_len})")
    return value


def validate_write(endpoint: str, raw: bytes) -> dict:
    """Parse and validate a write body; returns the payload to store."""
    text = raw.decode("utf-8", "strict") if raw else ""
    if not text.strip():
        if endpoint in ("close", "escalate"):
            return {}
        raise ValidationError("request body must be a JSON object")
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise ValidationError(f"invalid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ValidationError("request body must be a JSON object")
    if endpoint == "draft":
        _require_str(body, "subject", max_len=1000)
        _require_str(body, "body")
    elif endpoint == "notify":
        to = _require_str(body, "to", max_len=320)
        if not EMAIL_RE.match(to):
            raise ValidationError(f"field 'to' is not a valid email address: {to!r}")
        _require_str(body, "subject", max_len=1000)
        _require_str(body, "body")
    elif endpoint == "status":
        status = body.get("status")
        if status not in STATUSES:
            raise ValidationError(
                f"field 'status' must be one of {', '.join(STATUSES)}"
            )
    elif endpoint == "close":
        _require_str(body, "reason", optional=True)
    elif endpoint == "escalate":
        _require_str(body, "note", optional=True)
    return body


# --------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------


def _abort_socket(sock: socket.socket) -> None:
    """Close ``sock`` abruptly: SO_LINGER(1, 0) makes close() send an RST."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


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

    def _read_body(self) -> bytes:
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks, total = [], 0
            while True:
                size_line = self.rfile.readline(1024)
                if not size_line:
                    raise ConnectionError("client closed during chunked body")
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # trailers until blank line
                    while True:
                        line = self.rfile.readline(8192)
                        if line in (b"\r\n", b"\n", b""):
                            break
                    break
                total += size
                if total > MAX_BODY:
                    raise _BodyTooLarge()
                chunks.append(self.rfile.read(size))
                self.rfile.readline(1024)  # CRLF after chunk
            return b"".join(chunks)
        length = self.headers.get("Content-Length")
        if not length:
            return b""
        n = int(length)
        if n < 0:
            raise ValueError("negative Content-Length")
        if n > MAX_BODY:
            raise _BodyTooLarge()
        return self.rfile.read(n)

    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict | None = None
    ):
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
        _abort_socket(self.connection)
        try:
            # socket.close() is deferred while rfile holds a reference;
            # closing rfile performs the real close (and sends the RST) now.
            self.rfile.close()
        except OSError:
            pass

    # -- routing -------------------------------------------------------------
    def _dispatch(self, method: str) -> None:
        split = urlsplit(self.path)
        path = split.path
        write = WRITE_PATH_RE.match(path)
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
            elif path.startswith(LOOKUP_PREFIX):
                self._only(method, "GET") and self._handle_lookup(
                    unquote(path[len(LOOKUP_PREFIX) :])
                )
            elif path in ("/", "/index.html"):
                self._only(method, "GET") and self._handle_index()
            elif path == "/_sandbox/health":
                self._only(method, "GET") and self._json(200, {"ok": True})
            elif path == "/_sandbox/counts":
                self._only(method, "GET") and self._json(200, self.state.counts())
            elif path == "/_sandbox/deliveries":
                self._only(method, "GET") and self._handle_deliveries(split.query)
            elif path == "/_sandbox/faults":
                self._handle_faults(method, raw)
            elif path == "/_sandbox/reset":
                if self._only(method, "POST"):
                    self.state.reset()
                    self._json(200, {"ok": True, "faults": self.state.faults()})
            else:
                self._json(404, {"error": f"no such endpoint: {path}"})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001  # pragma: no cover - defensive
            self.state.log(f"http internal error: {exc!r}")
            self.close_connection = True
            try:
                self._json(500, {"error": f"internal error: {exc}"})
            except OSError:
                pass

    def _only(self, method: str, *allowed: str) -> bool:
        if method in allowed:
            return True
        self._json(
            405,
            {"error": f"method {method} not allowed"},
            {"Allow": ", ".join(allowed)},
        )
        return False

    # -- write endpoints -------------------------------------------------------
    def _handle_write(
        self, method: str, ticket: str, endpoint: str, raw: bytes
    ) -> None:
        state = self.state
        latency = state.begin_request(endpoint)
        expected = ENDPOINT_METHODS[endpoint]
        if method != expected:
            state.note("rejected")
            self._json(
                405, {"error": f"{endpoint} requires {expected}"}, {"Allow": expected}
            )
            return
        if latency > 0:
            time.sleep(latency)
        error_status = state.take_error(endpoint)
        if error_status is not None:
            state.log(f"http {endpoint} {ticket}: injected error {error_status}")
            self._json(
                error_status,
                {"error": f"injected fault: {endpoint} unavailable"},
                {"Retry-After": "0"},
            )
            return

        key = (self.headers.get("Idempotency-Key") or "").strip()
        try:
            if len(key) > MAX_KEY_LEN:
                raise ValidationError(f"Idempotency-Key too long (max {MAX_KEY_LEN})")
            if not TICKET_RE.match(ticket):
                raise ValidationError(f"invalid ticket id: {ticket!r}")
            payload = validate_write(endpoint, raw)
        except ValidationError as exc:
            state.note("rejected")
            self._json(422, {"error": str(exc)})
            return
        except UnicodeDecodeError:
            state.note("rejected")
            self._json(422, {"error": "request body is not valid UTF-8"})
            return

        delivery, replayed = state.record(
            key=key, method=method, endpoint=endpoint, ticket=ticket, payload=payload
        )
        state.log(
            f"http {endpoint} {ticket} key={key!r} -> {delivery['id']}"
            + (" (replayed)" if replayed else "")
        )
        if state.take_drop(endpoint):
            self._drop(f"{endpoint} {delivery['id']}")
            return
        self._json(
            200 if replayed else 201,
            {"id": delivery["id"], "key": key, "replayed": replayed},
        )

    # -- read / control endpoints ---------------------------------------------
    def _handle_lookup(self, key: str) -> None:
        rows = self.state.store.deliveries(key=key) if key else []
        if not rows:
            self._json(404, {"found": False})
            return
        self._json(
            200,
            {
                "found": True,
                "count": len(rows),
                "id": rows[0]["id"],
                "deliveries": rows,
            },
        )

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
            key=one("key"),
            endpoint=one("endpoint"),
            ticket=one("ticket"),
            limit=limit_n,
        )
        self._json(200, rows)

    def _handle_faults(self, method: str, raw: bytes) -> None:
        if method == "GET":
            self._json(200, self.state.faults())
        elif method == "DELETE":
            self._json(200, self.state.clear_faults())
        elif method == "POST":
            try:
                body = json.loads(raw.decode("utf-8") or "{}")
                self._json(200, self.state.set_faults(body))
            except (ValueError, ValidationError) as exc:
                self._json(422, {"error": str(exc)})
        else:
            self._only(method, "GET", "POST", "DELETE")

    def _handle_index(self) -> None:
        state = self.state
        counts = state.counts()
        faults = state.faults()
        rows = state.store.deliveries(limit=HTML_LIMIT, newest_first=True)
        e = html.escape
        summary = {k: v for k, v in counts.items() if k != "by_key"}
        dup_keys = {k: n for k, n in counts["by_key"].items() if n > 1}
        mode = (
            "honor keys (dedupe by Idempotency-Key)"
            if counts["honor_keys"]
            else "IGNORE keys (no dedupe)"
        )
        parts = [
            "<!doctype html><html><head><meta charset='utf-8'>",
            "<meta http-equiv='refresh' content='5'>",
            "<title>Sandbox helpdesk</title><style>",
            "body{font-family:system-ui,sans-serif;margin:1.5em;}",
            "table{border-collapse:collapse;font-size:.85em;}",
            "td,th{border:1px solid #ccc;padding:.25em .5em;vertical-align:top;text-align:left;}",
            "pre{margin:0;white-space:pre-wrap;max-width:60em;}",
            ".dup{background:#fdd;}",
            "</style></head><body>",
            "<h1>Sandbox helpdesk</h1>",
            f"<p>Mode: <strong>{e(mode)}</strong></p>",
            f"<h2>Counts</h2><pre>{e(json.dumps(summary, indent=2, sort_keys=True))}</pre>",
            f"<h2>Duplicated keys ({len(dup_keys)})</h2><pre>{e(json.dumps(dup_keys, indent=2))}</pre>",
            f"<h2>Faults</h2><pre>{e(json.dumps(faults, indent=2, sort_keys=True))}</pre>",
            f"<h2>Last {HTML_LIMIT} deliveries (newest first)</h2>",
            (
                "<table><tr><th>id</th><th>created</th><th>endpoint</th><th>method</th>"
                "<th>ticket</th><th>key</th><th>payload</th></tr>"
            ),
        ]
        for d in rows:
            cls = " class='dup'" if d["key"] in dup_keys else ""
            payload = json.dumps(
                d["payload"], indent=1, ensure_ascii=False, sort_keys=True
            )
            parts.append(
                f"<tr{cls}><td>{e(d['id'])}</td><td>{e(d['created_at'])}</td>"
                f"<td>{e(d['endpoint'])}</td><td>{e(d['method'])}</td>"
                f"<td>{e(d['ticket'])}</td><td>{e(d['key'])}</td>"
                f"<td><pre>{e(payload)}</pre></td></tr>"
            )
        parts.append("</table></body></html>\n")
        body = "".join(parts).encode("utf-8")
        self._send(
            200,
            body,
            "text/html; charset=utf-8",
            {
                "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'"
            },
        )


class _ServerMixin:
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    block_on_close = False


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class SandboxHTTPServer(_ServerMixin, http.server.ThreadingHTTPServer):
    def __init__(self, address, state: SandboxState):
        self.address_family = _family(address[0])
        self.state = state
        super().__init__(address, SandboxHTTPHandler)

    def server_bind(self):
        # Skip HTTPServer.server_bind's getfqdn() (a DNS lookup).
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = host
        self.server_port = port


# --------------------------------------------------------------------------
# SMTP
# --------------------------------------------------------------------------


def _parse_path(arg: str, prefix: str) -> tuple[str | None, str]:
    """``FROM:<a@b> SIZE=1`` -> ``('a@b', 'SIZE=1')``; ``None`` if malformed."""
    if arg[: len(prefix)].upper() != prefix:
        return None, ""
    rest = arg[len(prefix) :].strip()
    if rest.startswith("<"):
        end = rest.find(">")
        if end < 0:
            return None, ""
        return rest[1:end].strip(), rest[end + 1 :].strip()
    address, _, params = rest.partition(" ")
    return address.strip(), params.strip()


def parse_email(data: bytes, mail_from: str, rcpts: list[str]) -> tuple[str, str, dict]:
    """Returns ``(key, ticket, payload)`` for a received message."""
    payload: dict = {
        "envelope_from": mail_from,
        "to": list(rcpts),
        "message_id": "",
        "from": mail_from,
        "header_to": "",
        "cc": "",
        "subject": "",
        "body": "",
        "x_headers": {},
    }
    ticket = ""
    try:
        msg = BytesParser(policy=email.policy.default).parsebytes(data)
    except Exception:  # noqa: BLE001  # pragma: no cover - parser is very lenient
        payload["body"] = data.decode("utf-8", "replace")
        return "", "", payload

    def header(name: str) -> str:
        try:
            value = msg.get(name)
        except Exception:  # noqa: BLE001 - malformed mail must not kill the session
            value = None
            for k, v in msg.raw_items():
                if k.lower() == name.lower():
                    value = v
                    break
        return str(value).strip() if value is not None else ""

    payload["message_id"] = header("Message-ID")
    payload["from"] = header("From") or mail_from
    payload["header_to"] = header("To")
    payload["cc"] = header("Cc")
    payload["subject"] = header("Subject")
    for name, _ in msg.raw_items():
        if name.lower().startswith("x-"):
            payload["x_headers"][name] = header(name)
    ticket = header("X-Ticket") or header("X-Ticket-Id")
    try:
        part = msg.get_body(preferencelist=("plain", "html"))
        if part is not None:
            try:
                payload["body"] = part.get_content()
            except Exception:  # noqa: BLE001 - malformed mail must not kill the session
                raw = part.get_payload(decode=True) or b""
                payload["body"] = raw.decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - malformed mail must not kill the session
        payload["body"] = data.decode("utf-8", "replace")
    # The wire format uses CRLF; store body text with plain newlines.
    payload["body"] = payload["body"].replace("\r\n", "\n")
    return key_from_message_id(payload["message_id"]), ticket, payload


class _SMTPAbort(Exception):
    """The connection was dropped on purpose; stop handling it."""


class SandboxSMTPHandler(socketserver.StreamRequestHandler):
    timeout = 120

    @property
    def state(self) -> SandboxState:
        return self.server.state  # type: ignore[attr-defined]

    def _reset_txn(self) -> None:
        self.mail_from: str | None = None
        self.rcpts: list[str] = []

    def reply(self, code: int, *lines: str) -> None:
        lines = lines or ("",)
        out = []
        for i, line in enumerate(lines):
            sep = " " if i == len(lines) - 1 else "-"
            out.append(f"{code}{sep}{line}\r\n")
        self.wfile.write("".join(out).encode("utf-8"))
        self.wfile.flush()

    def handle(self) -> None:
        self._reset_txn()
        peer = "{}:{}".format(*self.client_address[:2])
        try:
            self.reply(220, f"{SMTP_HOSTNAME} ESMTP TicketSandbox ready")
            while True:
                line = self.rfile.readline(MAX_SMTP_COMMAND + 2)
                if not line:
                    return
                if not line.endswith(b"\n") and len(line) > MAX_SMTP_COMMAND:
                    self.reply(500, "5.5.2 Line too long")
                    return
                text = line.decode("utf-8", "replace").rstrip("\r\n")
                verb, _, arg = text.partition(" ")
                verb = verb.upper()
                handler = (
                    getattr(self, f"smtp_{verb}", None) if verb.isalpha() else None
                )
                if handler is None:
                    self.reply(500, "5.5.2 Command not recognized")
                    continue
                if handler(arg.strip()) is False:
                    return
        except _SMTPAbort:
            return
        except (OSError, ValueError) as exc:
            self.state.log(f"smtp {peer} connection error: {exc!r}")

    # -- commands ----------------------------------------------------------------
    def smtp_EHLO(self, arg):
        if not arg:
            self.reply(501, "5.5.4 Syntax: EHLO hostname")
            return
        self._reset_txn()
        self.reply(
            250,
            f"{SMTP_HOSTNAME} Hello {arg}",
            f"SIZE {MAX_SMTP_MESSAGE}",
            "8BITMIME",
            "SMTPUTF8",
            "HELP",
        )

    def smtp_HELO(self, arg):
        if not arg:
            self.reply(501, "5.5.4 Syntax: HELO hostname")
            return
        self._reset_txn()
        self.reply(250, f"{SMTP_HOSTNAME} Hello {arg}")

    def smtp_MAIL(self, arg):
        if self.mail_from is not None:
            self.reply(503, "5.5.1 Error: nested MAIL command")
            return
        address, _params = _parse_path(arg, "FROM:")
        if address is None:
            self.reply(501, "5.5.4 Syntax: MAIL FROM:<address>")
            return
        self.mail_from = address
        self.reply(250, "2.1.0 OK")

    def smtp_RCPT(self, arg):
        if self.mail_from is None:
            self.reply(503, "5.5.1 Error: need MAIL command")
            return
        address, _params = _parse_path(arg, "TO:")
        if not address:
            self.reply(501, "5.5.4 Syntax: RCPT TO:<address>")
            return
        self.rcpts.append(address)
        self.reply(250, "2.1.5 OK")

    def smtp_RSET(self, arg):
        self._reset_txn()
        self.reply(250, "2.0.0 OK")

    def smtp_NOOP(self, arg):
        self.reply(250, "2.0.0 OK")

    def smtp_VRFY(self, arg):
        self.reply(252, "2.0.0 Cannot VRFY user, but will accept message")

    def smtp_HELP(self, arg):
        self.reply(214, "2.0.0 EHLO HELO MAIL RCPT DATA RSET NOOP QUIT")

    def smtp_QUIT(self, arg):
        self.reply(221, "2.0.0 Bye")
        return False

    def smtp_STARTTLS(self, arg):
        self.reply(502, "5.5.1 STARTTLS not supported")

    def smtp_AUTH(self, arg):
        self.reply(502, "5.5.1 AUTH not supported")

    def smtp_DATA(self, arg):
        if not self.rcpts:
            self.reply(503, "5.5.1 Error: need RCPT command")
            return
        self.reply(354, "End data with <CR><LF>.<CR><LF>")
        chunks: list[bytes] = []
        size = 0
        too_big = False
        at_line_start = True
        while True:
            line = self.rfile.readline(MAX_SMTP_LINE)
            if not line:
                return False  # client went away mid-message
            if at_line_start:
                if line in (b".\r\n", b".\n"):
                    break
                if line.startswith(b"."):
                    line = line[1:]  # dot-unstuffing
            at_line_start = line.endswith(b"\n")
            size += len(line)
            if size > MAX_SMTP_MESSAGE:
                too_big = True
            elif not too_big:
                chunks.append(line)
        if too_big:
            self._reset_txn()
            self.reply(552, "5.3.4 Message too big")
            return
        return self._deliver(b"".join(chunks))

    def _deliver(self, data: bytes):
        state = self.state
        mail_from, rcpts = self.mail_from or "", list(self.rcpts)
        self._reset_txn()
        latency = state.begin_request("email")
        if latency > 0:
            time.sleep(latency)
        key, ticket, payload = parse_email(data, mail_from, rcpts)
        if state.take_error("email") is not None:
            state.log(f"smtp email key={key!r}: injected error 451")
            self.reply(451, "4.3.0 Injected fault: mail system temporarily unavailable")
            return
        delivery, replayed = state.record(
            key=key, method="SMTP", endpoint="email", ticket=ticket, payload=payload
        )
        state.log(
            f"smtp email to={rcpts} key={key!r} -> {delivery['id']}"
            + (" (replayed, not recorded)" if replayed else "")
        )
        if state.take_drop("email"):
            state.log(f"smtp DROP email {delivery['id']} (connection reset)")
            _abort_socket(self.connection)
            try:
                self.rfile.close()
            except OSError:
                pass
            raise _SMTPAbort()
        if replayed:
            self.reply(250, f"2.0.0 OK duplicate of {delivery['id']}, not recorded")
        else:
            self.reply(250, f"2.0.0 OK queued as {delivery['id']}")


class SandboxSMTPServer(_ServerMixin, socketserver.ThreadingTCPServer):
    def __init__(self, address, state: SandboxState):
        self.address_family = _family(address[0])
        self.state = state
        super().__init__(address, SandboxSMTPHandler)


# --------------------------------------------------------------------------
# Process wiring
# --------------------------------------------------------------------------


class SandboxServer:
    """Both listeners plus shared state; usable in-process too.

    >>> srv = SandboxServer(port=0, smtp_port=0).start()
    >>> srv.http_port, srv.smtp_port   # doctest: +SKIP
    >>> srv.stop()
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8025,
        smtp_port: int = 8026,
        db: str | None = None,
        honor_keys: bool = True,
        quiet: bool = False,
    ):
        self.host = host
        self.state = SandboxState(db=db, honor_keys=honor_keys, quiet=quiet)
        self._requested = (port, smtp_port)
        self.http: SandboxHTTPServer | None = None
        self.smtp: SandboxSMTPServer | None = None
        self._threads: list[threading.Thread] = []

    def start(self) -> SandboxServer:
        port, smtp_port = self._requested
        self.http = SandboxHTTPServer((self.host, port), self.state)
        try:
            self.smtp = SandboxSMTPServer((self.host, smtp_port), self.state)
        except BaseException:
            self.http.server_close()
            raise
        for name, srv in (("sandbox-http", self.http), ("sandbox-smtp", self.smtp)):
            t = threading.Thread(
                target=srv.serve_forever,
                kwargs={"poll_interval": 0.2},
                name=name,
                daemon=True,
            )
            t.start()
            self._threads.append(t)
        return self

    @property
    def http_port(self) -> int:
        return self.http.server_address[1]

    @property
    def smtp_port(self) -> int:
        return self.smtp.server_address[1]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.http_port}"

    def stop(self) -> None:
        for srv in (self.http, self.smtp):
            if srv is not None:
                srv.shutdown()
                srv.server_close()
        for t in self._threads:
            t.join(timeout=5)
        self.state.store.close()


def serve(
    host: str = "127.0.0.1",
    port: int = 8025,
    smtp_port: int = 8026,
    db: str | None = None,
    honor_keys: bool = True,
    quiet: bool = False,
    stdout=None,
) -> int:
    """Run until SIGTERM/SIGINT; prints ``{"http": p, "smtp": p}`` first."""
    stdout = stdout or sys.stdout
    try:
        server = SandboxServer(
            host, port, smtp_port, db=db, honor_keys=honor_keys, quiet=quiet
        ).start()
    except OSError as exc:
        sys.stderr.write(
            f"sandbox: cannot listen on {host} ({port}/{smtp_port}): {exc}\n"
        )
        return 2
    stop = threading.Event()

    def _on_signal(signum, frame):
        stop.set()

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[sig] = signal.signal(sig, _on_signal)
        except ValueError:  # not in the main thread
            pass
    try:
        stdout.write(
            json.dumps({"http": server.http_port, "smtp": server.smtp_port}) + "\n"
        )
        stdout.flush()
        _log(
            quiet,
            (
                f"listening: http={server.url} smtp={host}:{server.smtp_port} "
                f"db={db or ':memory:'} honor_keys={honor_keys}"
            ),
        )
        while not stop.wait(0.5):
            pass
        _log(quiet, "shutting down")
    finally:
        server.stop()
        for sig, handler in previous.items():
            try:
                signal.signal(sig, handler)
            except (ValueError, TypeError):
                pass
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sandbox",
        description="Sandbox helpdesk (HTTP JSON API) + mail server (SMTP).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--port", type=int, default=8025, help="HTTP port (0 = pick a free one)"
    )
    parser.add_argument(
        "--smtp-port", type=int, default=8026, help="SMTP port (0 = pick a free one)"
    )
    parser.add_argument(
        "--db", default=None, help="SQLite file for deliveries (default: in-memory)"
    )
    parser.add_argument(
        "--ignore-keys",
        action="store_true",
        help="record every request; do not dedupe on Idempotency-Key/Message-ID",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="do not log requests to stderr"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return serve(
        host=args.host,
        port=args.port,
        smtp_port=args.smtp_port,
        db=args.db,
        honor_keys=not args.ignore_keys,
        quiet=args.quiet,
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
