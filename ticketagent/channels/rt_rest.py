"""REST2 plumbing for the Request Tracker channel: its settings, the calls of one action under one deadline, reads.

`Attempt` runs the requests of one action. They share one deadline, so the
whole action ends within the channel's `max_call_seconds`, and it tracks
whether a write may already have landed: before that, a request that fails
proves nothing was changed (`failed`); after it, a missing answer leaves the
action `unknown`. A read of the action (the ticket before a change, the
change read back) that got no answer, or a 5xx, 408 or 429, is asked again
with back-off while the action's time allows; a write never is. `Reader`
makes the look-up's, the check's and the ticket source's reads, where
anything short of a complete answer raises `Unanswered`; the check and the
source ask again with back-off when the answer was missing or a 5xx.
"""

import random
import re
import time
from dataclasses import dataclass
from urllib.parse import urlencode

from django.conf import settings

from ledger.channels.base import CallDeadline, CallResult, Cause, failed, unknown
from ledger.channels.http import Answer, HttpClient, NoAnswer, NotSent

SYSTEM = "Request Tracker"
PER_PAGE = 100  # REST2's largest page
MIN_REQUEST_SECONDS = 0.2  # no request is started with less time than this left
READ_ATTEMPTS = 5  # a read (look-up, check, ticket source) is asked at most this often ...
READ_BACKOFF_SECONDS = 0.25  # ... waiting this long after the first failure, doubling each time ...
READ_BACKOFF_MAX_SECONDS = 2.0  # ... up to this
ACTION_READ_TRIES = 3  # a read inside an action is asked at most this often (its time allowing)
DEFAULT_STATUSES = {"open": "open", "pending": "stalled", "solved": "resolved", "escalated": "open",
                    "on_hold": "stalled"}
CREDENTIALS = "check HELPDESK_USER and HELPDESK_PASSWORD"


def rest_url(base: str) -> str:
    """RT's base URL (https://rt.example.com, or with RT's WebPath) as its REST2 root."""
    base = base.rstrip("/")
    return base if base.endswith("/REST/2.0") else base + "/REST/2.0"


@dataclass(frozen=True)
class RTConfig:
    """What the channel needs, from settings (HELPDESK_*, RT_*)."""

    url: str
    user: str
    password: str
    connect_timeout: float
    read_timeout: float
    custom_field: str
    escalation_queue: str
    escalation_owner: str
    escalation_priority: int | None
    statuses: dict

    @classmethod
    def from_settings(cls, **overrides) -> "RTConfig":
        values = dict(
            url=rest_url(settings.HELPDESK_URL), user=settings.HELPDESK_USER, password=settings.HELPDESK_PASSWORD,
            connect_timeout=settings.HELPDESK_CONNECT_TIMEOUT, read_timeout=settings.HELPDESK_READ_TIMEOUT,
            custom_field=getattr(settings, "RT_CUSTOM_FIELD", "IdempotencyKey") or "IdempotencyKey",
            escalation_queue=getattr(settings, "RT_ESCALATION_QUEUE", ""),
            escalation_owner=getattr(settings, "RT_ESCALATION_OWNER", ""),
            escalation_priority=getattr(settings, "RT_ESCALATION_PRIORITY", 100),
            statuses={**DEFAULT_STATUSES, **getattr(settings, "RT_STATUSES", {})},
        )
        values.update(overrides)
        values["url"] = rest_url(values["url"])
        return cls(**values)

    @property
    def request_seconds(self) -> float:
        return self.connect_timeout + self.read_timeout

    def client(self, *, within: float | None = None, max_body: int = 1024 * 1024) -> HttpClient:
        """An HTTP client for REST2; `within`: no request of it outlasts that many seconds per phase."""
        connect, read = self.connect_timeout, self.read_timeout
        if within is not None:
            connect, read = min(connect, within), min(read, within)
        return HttpClient(self.url, system=SYSTEM, connect_timeout=connect, read_timeout=read, user=self.user,
                          password=self.password, max_body=max_body)


def path_with(path: str, **params) -> str:
    """`path` with URL-encoded query parameters (TicketSQL, `fields[Queue]`, paging)."""
    return f"{path}?{urlencode(params)}" if params else path


def rt_message(answer: Answer) -> str:
    """RT's words in an answer: `{"message": …}`, a list of messages, or the start of the text."""
    data = answer.json(None)
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"]).strip()[:300]
    if isinstance(data, list):
        return "; ".join(str(m) for m in data)[:300]
    return answer.text.strip()[:200] or f"HTTP {answer.status}"


def rt_refusal(answer: Answer) -> bool:
    """A 4xx in RT's own words (a JSON body): RT refused the request before acting on it.
    Any other 4xx may be a proxy's or a gateway's, given while the request still reached RT."""
    return 400 <= answer.status < 500 and answer.json(None) is not None


def not_rt_words(answer: Answer) -> str:
    """How an answer that is not RT's own refusal reads in an error."""
    return (f"answered {answer.status} without RT's error body ({rt_message(answer)[:100]}): a proxy in front of "
            "RT may have answered while the write reached RT")


def location_id(answer: Answer) -> str:
    """The id at the end of a `Location: /REST/2.0/transaction/51` header."""
    match = re.search(r"/(\d+)/?$", answer.header("location"))
    return match.group(1) if match else ""


class Stop(Exception):
    """An action ends before its last call; `result` is its outcome."""

    def __init__(self, result: CallResult):
        super().__init__(result.error)
        self.result = result


class Attempt:
    """The requests of one action: one deadline, and whether a write of it may have landed."""

    def __init__(self, config: RTConfig, budget: float, call: CallDeadline):
        self.config, self.call = config, call  # `call`: the caller's deadline, asked before each request leaves
        self.deadline = time.monotonic() + budget
        self.landed = False

    def ended(self, error: str, *, cause: str) -> CallResult:
        """The action stops with no write of it in flight: `failed` while
        nothing landed, else `unknown` (reconcile looks for its key)."""
        if self.landed:
            return unknown(f"{error} (after an earlier write of this action was answered)", answered=True,
                           cause=cause)
        return failed(error, answered=True, cause=cause)

    def send(self, method: str, path: str, body=None, *, write: bool) -> Answer:
        """One request; raises `Stop` with the action's outcome when it cannot go on:
        no answer, 401, 408 or 5xx (and 429 for a read). Other answers are the caller's to judge.
        A read is asked again (ACTION_READ_TRIES, with back-off) while the action's time allows."""
        name = f"{method} {path.split('?', 1)[0]}"
        pause = READ_BACKOFF_SECONDS
        for tries in range(1, (1 if write else ACTION_READ_TRIES) + 1):
            left = self.deadline - time.monotonic()
            if left < MIN_REQUEST_SECONDS:
                raise Stop(self.ended(f"{SYSTEM}: the action ran out of time before {name}",
                                      cause=Cause.UNAVAILABLE))
            problem = self._one(name, method, path, body, write=write, within=left)
            if isinstance(problem, Answer):
                return problem
            if tries == ACTION_READ_TRIES or self.deadline - time.monotonic() < pause + MIN_REQUEST_SECONDS:
                break
            time.sleep(pause * random.uniform(0.8, 1.2))
            pause = min(READ_BACKOFF_MAX_SECONDS, pause * 2)
        raise Stop(self.ended(f"{problem} ({tries} {'try' if tries == 1 else 'tries'})", cause=Cause.UNAVAILABLE))

    def _one(self, name: str, method: str, path: str, body, *, write: bool, within: float) -> Answer | str:
        """One request: its answer, or -- for a read that got none, or a 5xx, 408 or 429 -- what happened.
        A write that cannot go on raises `Stop`."""
        try:
            answer = self.config.client(within=within).request(method, path, body, deadline=self.call)
        except NotSent as exc:
            if write:  # nothing of it left
                raise Stop(self.ended(str(exc), cause=Cause.UNAVAILABLE)) from None
            return str(exc)
        except NoAnswer as exc:
            if write:  # the write may still land
                raise Stop(unknown(f"{name}: {exc}", answered=False, cause=Cause.UNAVAILABLE)) from None
            return f"{name}: {exc}"
        if answer.status == 401:  # after an earlier write of the action landed, the action is part-done
            raise Stop(self.ended(f"{SYSTEM} refused the credentials (401) at {name}: {CREDENTIALS}",
                                  cause=Cause.REFUSED))
        error = f"{name} answered {answer.status}: {rt_message(answer)}"
        if write and (answer.status >= 500 or answer.status == 408):
            # a 5xx may come from a gateway whose upstream still works on the write: it may land still
            raise Stop(unknown(error, answered=answer.status < 500, cause=Cause.UNAVAILABLE))
        if not write and _passing(answer):
            return error
        if write and answer.ok:
            self.landed = True
        return answer


class Unanswered(Exception):
    """A read that did not get a complete answer: the look-up cannot tell."""


def answered_by(answer: Answer, what: str) -> str:
    """Who answered what, in an operator's words: RT's own refusal, or a status
    that may come from RT or from a proxy or gateway in front of it."""
    if answer.status >= 500 or answer.status in (408, 429) or answer.json(None) is None:
        return f"{SYSTEM} (or a proxy in front of it) answered {answer.status} to {what}: {rt_message(answer)}"
    return f"{SYSTEM} answered {answer.status} to {what}: {rt_message(answer)}"


def _passing(answer: Answer) -> bool:
    """An answer worth asking again for: a server error, a timeout or a rate limit (RT's, or a gateway's)."""
    return answer.status >= 500 or answer.status in (408, 429)


class Reader:
    """Reads for the look-up, the check and the ticket source: a complete JSON answer, or `Unanswered`.

    A read changes nothing, so one that got no answer, or a 5xx, 408 or 429,
    is asked again with back-off (READ_ATTEMPTS in all, READ_BACKOFF_SECONDS
    doubling): a flaky RT or proxy does not fail a check or an import.
    """

    def __init__(self, config: RTConfig, *, attempts: int | None = None):
        self.config = config
        self.client = config.client(max_body=16 * 1024 * 1024)
        self.attempts = max(1, attempts if attempts is not None else READ_ATTEMPTS)

    def get(self, path: str, **params) -> Answer:
        """The answer (any status but a passing one, unless the last try gave it), or `Unanswered`."""
        target = path_with(path, **params)
        for attempt in range(1, self.attempts + 1):
            try:
                answer = self.client.request("GET", target)
            except (NotSent, NoAnswer) as exc:
                if attempt == self.attempts:
                    tries = f" ({self.attempts} tries)" if self.attempts > 1 else ""
                    raise Unanswered(f"GET {path}: {exc}{tries}") from None
            else:
                if not _passing(answer) or attempt == self.attempts:
                    return answer
            time.sleep(min(READ_BACKOFF_MAX_SECONDS, READ_BACKOFF_SECONDS * 2 ** (attempt - 1))
                       * random.uniform(0.8, 1.2))
        raise AssertionError("unreachable")

    def json(self, path: str, **params) -> dict:
        answer = self.get(path, **params)
        if answer.status == 401:
            raise Unanswered(f"{SYSTEM} refused the credentials (401): {CREDENTIALS}")
        data = answer.json(None)
        if answer.status != 200 or not isinstance(data, dict):
            raise Unanswered(answered_by(answer, f"GET {path}"))
        return data

    def items(self, path: str, **params) -> list[dict]:
        """Every item of a collection, page by page (a non-superuser gets no
        `total`: a page shorter than PER_PAGE is the last)."""
        found: list[dict] = []
        for page in range(1, 1000):
            data = self.json(path, **params, per_page=PER_PAGE, page=page)
            items = data.get("items")
            if not isinstance(items, list):
                raise Unanswered(f"GET {path} answered without items")
            found += [item for item in items if isinstance(item, dict)]
            if len(items) < PER_PAGE:
                return found
        raise Unanswered(f"GET {path}: more than {1000 * PER_PAGE} items")

    def search(self, query: str, fields: str = "Type,ObjectId", limit: int = PER_PAGE) -> list[dict]:
        """Transactions matching a TransactionSQL query: the first `limit`."""
        data = self.json("/transactions", query=query, fields=fields, per_page=min(limit, PER_PAGE))
        items = data.get("items")
        if not isinstance(items, list):
            raise Unanswered("the transaction search answered without items")
        return items
