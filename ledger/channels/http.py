"""One HTTP request with the distinctions exactly-once needs: never sent, sent without an answer, answered.

`HttpClient.request()` either returns the `Answer` (any status), or raises
`NotSent` (the connection could not be opened: nothing left this process) or
`NoAnswer` (the request may have left; no complete answer came back), or
its kind `AnswerCut` (the answer began, its status line came, then the
connection broke: the system has handled the request, so nothing more of it
can land later). The write's outcome then follows from which one it was
(`write_outcome()`, `call()`).

A connection that cannot be opened is tried again with back-off (nothing
left this process), for as long as the caller's deadline (`deadline=`, a
`ledger.channels.base.CallDeadline`: required for a write) leaves room for
the answer; the deadline is asked
once more right before the request's bytes leave, and `Expired` raised when
it has passed -- the last check before the point of no return. From then
on the request and its whole answer are bounded together, by the read
timeout and the caller's deadline (`_AnswerBy`): a socket's own timeout
bounds each read, and an answer that trickles in a byte at a time would
outlive both, and the lease the caller checked for them.
"""

import base64
import http.client
import io
import json
import time
from dataclasses import dataclass, field
from functools import partial
from urllib.parse import urlsplit

from ledger.channels.base import CallDeadline, CallResult, Cause, committed, failed, unknown

CONNECT_TRIES = 4  # a connection refused or timed out: tried again after 0.2, 0.4, 0.8 s
CONNECT_BACKOFF_SECONDS = 0.2
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class NotSent(Exception):
    """The request never left this process (connection refused, DNS failure)."""


class NoAnswer(Exception):
    """The request may have reached the system; no complete answer came back."""


class AnswerCut(NoAnswer):
    """The system began to answer (a status line came back), then the connection broke."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Answer:
    status: int
    text: str
    headers: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self, default=None):
        try:
            return json.loads(self.text)
        except ValueError:
            return default

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name.lower(), default)


class _AnswerBy(io.RawIOBase):
    """The bytes of an answer, read from `raw` (the socket's own reader, which keeps it open for the answer)
    with each read of `sock` waiting at most until `ends_at` (monotonic); past it, `TimeoutError` (an
    `OSError`, as a socket's own timeout is)."""

    def __init__(self, sock, raw, ends_at: float, bound: float):
        self.sock, self.raw, self.ends_at, self.bound = sock, raw, ends_at, bound

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self.ends_at - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no complete answer within {self.bound:.1f} s")
        self.sock.settimeout(left)
        try:
            return self.raw.readinto(buffer)
        except TimeoutError:
            raise TimeoutError(f"no complete answer within {self.bound:.1f} s") from None

    def close(self) -> None:
        self.raw.close()
        super().close()


class _ResponseBy(http.client.HTTPResponse):
    """http.client's answer, its socket read through `_AnswerBy` (the connection's `response_class`: the one
    hook http.client has for how an answer is read)."""

    def __init__(self, sock, *args, ends_at: float, bound: float, **kwargs):
        super().__init__(sock, *args, **kwargs)
        self.fp = io.BufferedReader(_AnswerBy(sock, self.fp.detach(), ends_at, bound))  # nothing read yet


class HttpClient:
    """A base URL, timeouts and credentials; one connection per request."""

    def __init__(self, base_url: str, *, system: str, connect_timeout: float, read_timeout: float, token: str = "",
                 user: str = "", password: str = "", max_body: int = 1024 * 1024):
        self.base_url = base_url.rstrip("/")
        self.system = system  # how errors name it: "the helpdesk", "Request Tracker"
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.max_body = max_body
        self.auth = ""
        if user:
            self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        elif token:
            self.auth = f"Bearer {token}"

    @property
    def max_call_seconds(self) -> float:
        return self.connect_timeout + self.read_timeout

    def _connect(self) -> http.client.HTTPConnection:
        parts = urlsplit(self.base_url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = cls(parts.hostname, parts.port, timeout=self.connect_timeout)
        conn.connect()
        conn.sock.settimeout(self.read_timeout)
        return conn

    def _connect_with_retries(self, what: str, deadline: CallDeadline) -> http.client.HTTPConnection:
        """A connection, tried again with back-off while the deadline leaves
        room for a connect and the answer; `NotSent` when none opened."""
        pause = CONNECT_BACKOFF_SECONDS
        for tries in range(1, CONNECT_TRIES + 1):
            deadline.room_to_send(self.connect_timeout + self.read_timeout, what)
            try:
                return self._connect()
            except OSError as exc:
                if tries == CONNECT_TRIES or deadline.time_left() < pause + self.connect_timeout + self.read_timeout:
                    raise NotSent(f"could not connect to {self.system} ({tries} tries): {exc}") from exc
                time.sleep(pause)
                pause *= 2
        raise AssertionError("unreachable")

    def headers(self, extra: dict | None = None) -> dict:
        headers = {"Accept": "application/json"}
        if self.auth:
            headers["Authorization"] = self.auth
        return {**headers, **(extra or {})}

    def request(self, method: str, path: str, body=None, headers: dict | None = None, *,
                deadline: CallDeadline | None = None) -> Answer:
        """`path` is appended to the base URL's path; a dict or list body is sent as JSON. A write is sent only
        under the caller's `deadline`; a read without one is bounded by the timeouts alone."""
        what = f"{method} {path.split('?')[0]}"
        if deadline is None:
            if method in WRITE_METHODS:
                raise TypeError(f"{what}: a write is sent only under the caller's deadline (perform's `deadline`)")
            deadline = CallDeadline(float("inf"))
        data = None
        extra = dict(headers or {})
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            extra.setdefault("Content-Type", "application/json")
        conn = self._connect_with_retries(what, deadline)
        try:
            # the last check before the request's bytes leave (raises Expired)
            deadline.room_to_send(self.read_timeout, what)
            if method in WRITE_METHODS:
                deadline.writes_sent += 1
            # the request and its whole answer, by the read timeout (within the caller's deadline, checked above)
            ends_at = min(time.monotonic() + self.read_timeout, deadline.deadline)
            conn.sock.settimeout(max(ends_at - time.monotonic(), 0.001))  # all of a send, since Python 3.5
            conn.response_class = partial(_ResponseBy, ends_at=ends_at, bound=self.read_timeout)
            try:
                conn.request(method, urlsplit(self.base_url).path.rstrip("/") + path, data, self.headers(extra))
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                raise NoAnswer(f"{type(exc).__name__} after sending: {exc}") from exc
            try:
                raw = resp.read(self.max_body)
                if len(raw) < self.max_body and resp.length:  # read(n) returns a cut body without a word
                    raise http.client.IncompleteRead(raw, resp.length)
                text = raw.decode("utf-8", "replace")
            except (OSError, http.client.HTTPException) as exc:
                raise AnswerCut(f"{type(exc).__name__} after {self.system} answered {resp.status}: {exc}",
                                resp.status) from exc
            return Answer(resp.status, text, {k.lower(): v for k, v in resp.getheaders()})
        finally:
            conn.close()


def write_outcome(answer: Answer, *, system: str, ref: str = "") -> CallResult:
    """A write's answer: 2xx committed; a 4xx refusal (not 408) failed; anything else unknown.

    A 429 was not processed: failed, and the system unavailable for now (the
    caller waits and sends it again), not refused. A 5xx proves nothing: a
    gateway in front of the system (nginx, Apache) answers 502/503/504 while
    its upstream may still be working on the request, so it is unknown and
    not answered -- it may land still, for as long as the channel's
    in-flight bound."""
    if answer.ok:
        return committed(ref)
    if answer.status == 429:
        return failed(f"{system} answered 429 (too many requests), so it did not act: {answer.text[:200]}",
                      answered=True, cause=Cause.UNAVAILABLE)
    if 400 <= answer.status < 500 and answer.status != 408:
        return failed(f"{system} refused with {answer.status}: {answer.text[:200]}", answered=True,
                      cause=Cause.REFUSED)
    return unknown(f"{system} (or a gateway in front of it) answered {answer.status}: {answer.text[:200]}",
                   answered=answer.status < 500, cause=Cause.UNAVAILABLE)


def call(client: HttpClient, method: str, path: str, body=None, *, headers: dict | None = None,
         deadline: CallDeadline):
    """One write under the caller's `deadline`: the `Answer`, or the CallResult that ends it when no answer
    came."""
    try:
        return client.request(method, path, body, headers, deadline=deadline)
    except NotSent as exc:
        return failed(str(exc), answered=False, cause=Cause.UNAVAILABLE)
    except AnswerCut as exc:
        return unknown(str(exc), answered=exc.status < 500, cause="" if exc.status < 500 else Cause.UNAVAILABLE)
    except NoAnswer as exc:
        return unknown(str(exc), answered=False, cause=Cause.UNAVAILABLE)
