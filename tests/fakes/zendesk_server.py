"""A real HTTP server that answers like the Zendesk Support API, for the Zendesk channel and ticket-source tests.

It listens on 127.0.0.1:<free port> in a daemon thread of the pytest
process; the data lives in `ZendeskState` (tests/fakes/zendesk_state.py,
which cites the documentation of every shape). Served:

    GET /api/v2/users/me.json                 the authenticated user (anonymous without credentials)
    GET /api/v2/users/show_many.json?ids=1,2  users by id
    GET /api/v2/groups.json (cursor or offset pages)
    GET /api/v2/groups/{id}.json
    GET /api/v2/tickets/{id}.json
    PUT /api/v2/tickets/{id}.json             {"ticket": {...}} -> {"ticket", "audit"}
    GET /api/v2/tickets/{id}/audits.json      cursor (page[size], page[after]) or offset (page, per_page)
    GET /api/v2/views/{id}/tickets.json       cursor or offset; no side-loads
    GET /api/v2/search.json?query=...         offset only (page, per_page), include=tickets(users)

Zendesk's conventions it keeps (https://developer.zendesk.com/api-reference/introduction/):
basic auth as `{email}/token:{api_token}`, a wrong one answered 401
`{"error": "Couldn't authenticate you"}`; at most 100 records a page, cursor
pages with `meta.has_more/after_cursor/before_cursor` and `links.next/prev`,
offset pages with `next_page`/`previous_page`/`count`
(https://developer.zendesk.com/api-reference/introduction/pagination/);
search at most 1,000 results, a page past them 422; 429 with `Retry-After`
(https://developer.zendesk.com/api-reference/introduction/rate-limits/).
`page_limit` lowers the page cap so small tests page.

Faults for the next matching requests (`kind`: "update", "audits", "me",
"view", "search", "users" or "any"):

    server.fail_next("update", "drop_after")          apply, then close the connection unanswered
    server.fail_next("update", "drop_before")         close the connection, nothing applied
    server.fail_next("update", "error_after", status=503)   apply, then answer 5xx
    server.fail_next("update", "error_before", status=500)  answer 5xx, nothing applied
    server.fail_next("update", "rate_limit", retry_after="1", times=2)   429, nothing applied
    server.fail_next("update", "slow", delay=1.5)     wait, then apply and answer
    server.fail_next("audits", "error_before", skip=1)   the second audits page fails

`server.requests` records every request (method, path, query, headers, body).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from tests.fakes.zendesk_state import NOT_FOUND, ZendeskState

AGENT_TOKEN = "zd-api-token-6f1c2b9e4d7a"  # noqa: S105 - the fake's own credential
SEARCH_LIMIT = 1000
ROUTES = (
    ("GET", re.compile(r"/api/v2/users/me(?:\.json)?"), "me"),
    ("GET", re.compile(r"/api/v2/users/show_many(?:\.json)?"), "users"),
    ("GET", re.compile(r"/api/v2/groups(?:\.json)?"), "groups"),
    ("GET", re.compile(r"/api/v2/groups/(\d+)(?:\.json)?"), "group"),
    ("GET", re.compile(r"/api/v2/tickets/(\d+)(?:\.json)?"), "ticket"),
    ("PUT", re.compile(r"/api/v2/tickets/(\d+)(?:\.json)?"), "update"),
    ("GET", re.compile(r"/api/v2/tickets/(\d+)/audits(?:\.json)?"), "audits"),
    ("GET", re.compile(r"/api/v2/views/(\d+)/tickets(?:\.json)?"), "view"),
    ("GET", re.compile(r"/api/v2/search(?:\.json)?"), "search"),
)


class FakeZendesk:
    """The server: `start()`, `url`, the `state`, faults, the request log, `stop()`."""

    def __init__(self):
        self.state = ZendeskState()
        self.token = AGENT_TOKEN
        self.faults: list[dict] = []
        self.requests: list[dict] = []
        self.page_limit = 100
        self.lock = threading.Lock()
        self.httpd: ThreadingHTTPServer | None = None

    @property
    def email(self) -> str:
        return self.state.agent["email"]

    def start(self) -> FakeZendesk:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.fake = self  # type: ignore[attr-defined]
        threading.Thread(target=self.httpd.serve_forever, name="fake-zendesk", daemon=True).start()
        return self

    def stop(self) -> None:
        if self.httpd:
            self.httpd.shutdown()
            self.httpd.server_close()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def reset(self) -> None:
        self.state.reset()
        with self.lock:
            self.faults.clear()
            self.requests.clear()
        self.page_limit = 100

    def fail_next(self, kind: str, mode: str, *, times: int = 1, skip: int = 0, status: int = 503,
                  retry_after: str = "1", delay: float = 1.0) -> None:
        """Arm a fault for the next `times` requests of `kind`, after letting `skip` of them through."""
        with self.lock:
            self.faults.append({"kind": kind, "mode": mode, "left": times, "skip": skip, "status": status,
                                "retry_after": retry_after, "delay": delay})

    def take_fault(self, kind: str) -> dict | None:
        with self.lock:
            for fault in self.faults:
                if fault["kind"] not in (kind, "any") or fault["left"] <= 0:
                    continue
                if fault["skip"] > 0:
                    fault["skip"] -= 1
                    continue
                fault["left"] -= 1
                return dict(fault)
        return None

    def logged(self, kind: str | None = None, method: str | None = None) -> list[dict]:
        with self.lock:
            return [r for r in self.requests if (kind is None or r["kind"] == kind)
                    and (method is None or r["method"] == method)]

    def authenticate(self, header: str) -> dict | None:
        """The user a Basic `{email}/token:{token}` header names, or None."""
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, _, secret = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if user == f"{self.email}/token" and secret == self.token:
            return self.state.agent
        return None


def use_fake_zendesk(server: FakeZendesk, settings) -> None:
    """Point the product's settings at the fake (pytest-django's `settings` fixture)."""
    settings.HELPDESK_KIND = "zendesk"
    settings.HELPDESK_URL = server.url
    settings.HELPDESK_USER = server.email
    settings.HELPDESK_TOKEN = server.token
    settings.HELPDESK_CONNECT_TIMEOUT = 1.0
    settings.HELPDESK_READ_TIMEOUT = 2.0
    settings.ZENDESK_ESCALATION_GROUP_ID = 0
    settings.ZENDESK_ESCALATION_PRIORITY = "high"
    settings.ZENDESK_RATE_LIMIT_MAX_WAIT = 2.0


# --------------------------------------------------------------------------- HTTP


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format, *args):  # noqa: A002 - quiet
        pass

    @property
    def fake(self) -> FakeZendesk:
        return self.server.fake  # type: ignore[attr-defined]

    def do_GET(self):  # noqa: N802
        self.dispatch("GET")

    def do_PUT(self):  # noqa: N802
        self.dispatch("PUT")

    def send_json(self, status: int, payload, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def drop(self) -> None:
        """Close the connection without an answer."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def dispatch(self, method: str) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        kind, match = "unknown", None
        for route_method, pattern, name in ROUTES:
            found = pattern.fullmatch(parts.path)
            if found and route_method == method:
                kind, match = name, found
                break
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = "<not JSON>"
        with self.fake.lock:
            self.fake.requests.append({"method": method, "path": parts.path, "query": parse_qs(parts.query),
                                       "kind": kind, "headers": {k.lower(): v for k, v in self.headers.items()},
                                       "body": body})
        if kind == "unknown":
            return self.send_json(404, {"error": "InvalidEndpoint", "description": "Not found"})
        self.serve(kind, match, parse_qs(parts.query), body)

    def serve(self, kind: str, match, query: dict, body) -> None:
        fake = self.fake
        fault = fake.take_fault(kind)
        mode = fault["mode"] if fault else ""
        if mode == "drop_before":
            return self.drop()
        if mode == "error_before":
            return self.send_json(fault["status"], {"error": "ServerError", "description": "Internal server error"})
        if mode == "rate_limit":
            return self.send_rate_limited(fault["retry_after"])
        if mode == "slow":
            time.sleep(fault["delay"])
        auth = self.headers.get("Authorization", "")
        user = fake.authenticate(auth)
        if user is None and not (kind == "me" and not auth):
            return self.send_json(401, {"error": "Couldn't authenticate you"})
        status, payload = getattr(self, f"on_{kind}")(match, query, body, user)
        if mode == "drop_after":
            return self.drop()
        if mode == "error_after":
            return self.send_json(fault["status"], {"error": "ServerError", "description": "Internal server error"})
        self.send_json(status, payload)

    def send_rate_limited(self, retry_after: str) -> None:
        data = b"Number of allowed API requests per minute exceeded"
        self.send_response(429)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        if retry_after:
            self.send_header("Retry-After", retry_after)
        self.end_headers()
        self.wfile.write(data)

    # ------------------------------------------------------------------ endpoints

    def on_me(self, match, query, body, user):
        if user is None:  # an unauthenticated request is answered as the anonymous user
            return 200, {"user": {"id": None, "name": "Anonymous user", "email": "invalid@example.com",
                                  "role": "end-user"}}
        return 200, {"user": dict(user)}

    def on_users(self, match, query, body, user):
        ids = [int(i) for i in ",".join(query.get("ids", [""])).split(",") if i.strip().isdigit()]
        return 200, {"users": self.fake.state.users_by_ids(ids[:100])}

    def on_groups(self, match, query, body, user):
        with self.fake.state.lock:
            groups = [dict(group) for _, group in sorted(self.fake.state.groups.items())]
        return 200, self.page("groups", groups, query)

    def on_group(self, match, query, body, user):
        group = self.fake.state.groups.get(int(match.group(1)))
        return (200, {"group": dict(group)}) if group else NOT_FOUND

    def on_ticket(self, match, query, body, user):
        ticket = self.fake.state.ticket(int(match.group(1)))
        return (200, {"ticket": ticket}) if ticket else NOT_FOUND

    def on_update(self, match, query, body, user):
        return self.fake.state.update_ticket(int(match.group(1)), body, author_id=user["id"],
                                             client=self.headers.get("User-Agent", "API"))

    def on_audits(self, match, query, body, user):
        ticket_id = int(match.group(1))
        if self.fake.state.ticket(ticket_id) is None:
            return NOT_FOUND
        if ticket_id in self.fake.state.forbidden:
            return 403, {"error": "Forbidden", "description": "You do not have access to this page."}
        return 200, self.page("audits", self.fake.state.audit_list(ticket_id), query)

    def on_view(self, match, query, body, user):
        tickets = self.fake.state.view_ticket_list(int(match.group(1)))
        if tickets is None:
            return NOT_FOUND
        return 200, self.page("tickets", tickets, query)

    def on_search(self, match, query, body, user):
        status, found = self.fake.state.search(" ".join(query.get("query", [""])))
        if status != 200:
            return status, found
        per_page = self.size(query.get("per_page", ["100"])[0])
        page = int(query.get("page", ["1"])[0] or 1)
        if (page - 1) * per_page >= SEARCH_LIMIT:  # "page=11 at 100 results per page"
            return 422, {"error": "InsufficientResourceError", "description": "Search results are limited to 1000"}
        payload = self.offset_page("results", found[:SEARCH_LIMIT], query, page, per_page)
        payload["count"] = len(found)
        payload["facets"] = None
        if "tickets(users)" in ",".join(query.get("include", [])):
            ids = {t[f] for t in payload["results"] for f in ("requester_id", "submitter_id", "assignee_id") if t[f]}
            payload["users"] = self.fake.state.users_by_ids(sorted(ids))
        return 200, payload

    # ------------------------------------------------------------------ pagination

    def size(self, raw: str) -> int:
        try:
            asked = int(raw)
        except ValueError:
            asked = 100
        return max(1, min(asked, 100, self.fake.page_limit))

    def link(self, query: dict, **changes) -> str:
        params = {k: v[0] for k, v in query.items()}
        params.update({k: str(v) for k, v in changes.items()})
        params = {k: v for k, v in params.items() if v is not None}
        return f"{self.fake.url}{urlsplit(self.path).path}?{urlencode(params)}"

    def page(self, name: str, records: list[dict], query: dict) -> dict:
        if "page[size]" not in query:
            page = int(query.get("page", ["1"])[0] or 1)
            return self.offset_page(name, records, query, page, self.size(query.get("per_page", ["100"])[0]))
        size = self.size(query["page[size]"][0])
        start = _decode_cursor(query.get("page[after]", [""])[0])
        chunk = records[start:start + size]
        end = start + len(chunk)
        has_more = end < len(records)
        after, before = _encode_cursor(end), _encode_cursor(start)
        query = {k: v for k, v in query.items() if k not in ("page[after]", "page[before]")}
        return {name: chunk, "meta": {"has_more": has_more, "after_cursor": after, "before_cursor": before},
                "links": {"next": self.link(query, **{"page[after]": after}) if has_more else None,
                          "prev": self.link(query, **{"page[before]": before}) if start else None}}

    def offset_page(self, name: str, records: list[dict], query: dict, page: int, per_page: int) -> dict:
        start = (page - 1) * per_page
        more = start + per_page < len(records)
        return {name: records[start:start + per_page], "count": len(records),
                "next_page": self.link(query, page=page + 1, per_page=per_page) if more else None,
                "previous_page": self.link(query, page=page - 1, per_page=per_page) if page > 1 else None}


def _encode_cursor(index: int) -> str:
    return base64.urlsafe_b64encode(f"i:{index}".encode()).decode()


def _decode_cursor(cursor: str) -> int:
    try:
        return int(base64.urlsafe_b64decode(cursor.encode()).decode().removeprefix("i:"))
    except (ValueError, binascii.Error):
        return 0


@pytest.fixture(scope="module")
def zendesk_server():
    """A fake Zendesk for a test module."""
    server = FakeZendesk().start()
    yield server
    server.stop()


@pytest.fixture
def zd(zendesk_server, settings):
    """The fake Zendesk, emptied, with the product's settings pointed at it."""
    zendesk_server.reset()
    use_fake_zendesk(zendesk_server, settings)
    return zendesk_server
