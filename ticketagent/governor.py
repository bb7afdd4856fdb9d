"""Waiting for an outside API, shared by every worker through Redis: its rate limits, one back-off for all, its outages.

One governor per API: the model API (one per `OPENAI_BASE_URL` + `OPENAI_MODEL`,
`governor_for`) and each channel's system -- the helpdesk, the mail server
(`ticketagent.channels.waiting`). Before each request a caller waits for its
turn (`Governor.turn()`):

- a shared back-off is in force -- a 429 told one worker to wait
  (`retry-after`), or the API said its remaining requests or tokens are
  0 until a reset (`x-ratelimit-*`): everyone waits it out;
- the API is down (connections refused, timeouts, 5xx past the caller's
  quick retries): everyone waits; one caller at a time probes it, with a
  back-off from `Limits.first_pause` doubling up to `Limits.probe_max_seconds`;
  the first answer ends the outage for all;
- requests and tokens per minute and calls in flight (`Limits`: for the
  model API `OPENAI_RPM`, `OPENAI_TPM`, `OPENAI_MAX_CONCURRENCY`; empty: as
  the API's headers say; none for a channel).

A rate limit or an outage never fails an item: the caller waits, at most
its wait (`MODEL_WAIT_SECONDS`, `CHANNEL_WAIT_SECONDS`), then the item is
handed back to the queue (not failed) and waits there. Times are Redis's own
clock (`TIME`), so hosts' clocks do not matter. Nothing here is a source of
truth: a flushed Redis only forgets a back-off.
"""

import hashlib
import logging
import re
import secrets
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings

from ticketagent.stopping import process_stopping

log = logging.getLogger(__name__)

_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$")


def reset_seconds(text: str | None) -> float | None:
    """An `x-ratelimit-reset-*` value ("1s", "6m0s", "120ms", "0.5s") in seconds; None when unreadable."""
    match = _DURATION.match((text or "").strip())
    if not text or not match or not any(match.groups()):
        return None
    h, m, s, ms = (float(g) if g else 0.0 for g in match.groups())
    return h * 3600 + m * 60 + s + ms / 1000


@dataclass(frozen=True)
class Limits:
    """What a governor's turns obey, read at each turn (settings may change): 0 is no limit."""

    slot_seconds: float  # a caller that died mid-call gives its slot back after this
    probe_max_seconds: float  # the longest pause between two probes of an API that is down
    first_pause: float = 1.0  # the pause before the first probe; it doubles with each probe that fails
    rpm: int = 0
    tpm: int = 0
    cap: int = 0  # calls in flight


def model_limits() -> Limits:
    """The model API's, from the OPENAI_* settings."""
    return Limits(slot_seconds=settings.OPENAI_TIMEOUT + 5, probe_max_seconds=settings.MODEL_PROBE_MAX_SECONDS,
                  rpm=settings.OPENAI_RPM or 0, tpm=settings.OPENAI_TPM or 0, cap=settings.OPENAI_MAX_CONCURRENCY or 0)


class Waited(Exception):
    """The caller waited MODEL_WAIT_SECONDS for its turn: `why` says for what, since when."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


@dataclass
class Turn:
    """One caller's permission to send one request; tell the governor how it went."""

    governor: "Governor"
    token: str
    probing: bool
    ended: bool = False

    def answered(self, headers=None, tokens: int = 0) -> None:
        self.governor.answered(self, headers or {}, tokens)

    def rate_limited(self, retry_after: float | None) -> None:
        self.governor.rate_limited(self, retry_after)

    def unreachable(self) -> None:
        self.governor.unreachable(self)

    def release(self) -> None:
        """The call is over and said nothing of the API (the slot and a probe's right are given back)."""
        if not self.ended:
            self.governor.end_silent(self)


class Governor:
    """See the module docstring. Thread-safe: a turn and the end of a call are one Redis script each."""

    def __init__(self, redis_conn, endpoint: str, *, what: str = "the model API",
                 limits: Callable[[], Limits] = model_limits, outage_log=None):
        self.r = redis_conn
        self.key = "ticketagent:governor:" + hashlib.sha256(endpoint.encode()).hexdigest()[:16]
        self.endpoint = endpoint
        self.what = what  # how people are told what is waited for: "the model API", "the helpdesk"
        self.limits = limits
        self.outage_log = outage_log  # told when the API goes down and comes back (`outages.OutageLog`), or None
        self._turn_script = redis_conn.register_script(_TURN)
        self._end_script = redis_conn.register_script(_END)

    # -- time ------------------------------------------------------------------------
    def now(self) -> float:
        seconds, micros = self.r.time()
        return seconds + micros / 1_000_000

    def _k(self, name: str) -> str:
        return f"{self.key}:{name}"

    # -- waiting for a turn ----------------------------------------------------------
    @contextmanager
    def turn(self, *, give_up: float):
        """Wait for the turn to send one request (Waited once the monotonic clock reaches `give_up`: one
        call's wait, however many turns it takes); the slot is released however it ends."""
        turn = self.take(give_up=give_up)
        try:
            yield turn
        finally:
            turn.release()

    def take(self, *, give_up: float) -> Turn:
        """`turn()` for a caller that releases the turn itself (`Turn.release()`, or what the answer said)."""
        token = secrets.token_hex(8)
        while True:
            pause, why = self._try(token)
            if pause <= 0:
                return Turn(self, token, why == "probe")
            left = give_up - time.monotonic()
            if left <= 0:
                raise Waited(why)
            if process_stopping():
                raise Waited(f"the worker is stopping ({why})")
            time.sleep(min(pause, left, 1.0))

    def _try(self, token: str) -> tuple[float, str]:
        """One look, in one round trip (`_TURN`): (0, "") when this request may go -- its slot taken and it
        counted in its minute --, (0, "probe") when it may go as the probe of a down endpoint, else
        (seconds to wait, why)."""
        limits = self.limits()
        rpm, tpm, cap, slot = limits.rpm, limits.tpm, limits.cap, limits.slot_seconds
        answer, pause, limit = self._turn_script(args=[self.key, token, rpm, tpm, cap, slot, int(slot * 1000)])
        answer = answer.decode() if isinstance(answer, bytes) else answer
        if answer in ("go", "probe"):
            return 0, "" if answer == "go" else "probe"
        why = {"rpm": f"the requests of this minute reached OPENAI_RPM={int(limit)}",
               "tpm": f"the tokens of this minute reached OPENAI_TPM={int(limit)}",
               "cap": "the calls in flight are at OPENAI_MAX_CONCURRENCY"}.get(answer) or self.waiting_words()
        return float(pause), why

    def end_silent(self, turn: Turn) -> None:
        self._end(turn, answered=False)

    def _end(self, turn: Turn, *, answered: bool, tokens: int = 0, learned=None) -> float:
        """Give the slot (and a probe's right) back; for an answer also end an outage, count its tokens and
        keep the limits the API said -- in one round trip (`_END`). Returns Redis's time."""
        turn.ended = True
        learned = learned or {}
        now, back = self._end_script(args=[self.key, turn.token, int(turn.probing), int(answered), max(tokens, 0),
                                           learned.get("rpm", ""), learned.get("tpm", "")])
        if int(back) and self.outage_log is not None:  # this answer ended an outage
            self.outage_log.ended(self.what, self.endpoint)
        return float(now)

    # -- what the answer said --------------------------------------------------------
    def answered(self, turn: Turn, headers, tokens: int) -> None:
        """An answer came (any status but 429 and 5xx): the call is over, the endpoint is up; tokens counted;
        limits learned."""
        get = headers.get
        learned = {name: int(get(f"x-ratelimit-limit-{kind}")) for name, kind in (("rpm", "requests"),
                                                                                  ("tpm", "tokens"))
                   if str(get(f"x-ratelimit-limit-{kind}") or "").isdigit()}
        now = self._end(turn, answered=True, tokens=tokens, learned=learned)
        for kind in ("requests", "tokens"):
            if str(get(f"x-ratelimit-remaining-{kind}") or "") == "0":
                wait = reset_seconds(get(f"x-ratelimit-reset-{kind}"))
                if wait:
                    self._back_off(now + wait, f"the API's {kind} remaining are 0")

    def rate_limited(self, turn: Turn, retry_after: float | None) -> None:
        """A 429: everyone waits `retry-after` (or 1, 2, 4 ... s while they keep coming)."""
        now = self.now()
        strikes = self.r.incr(self._k("strikes"))
        self.r.expire(self._k("strikes"), 60)
        wait = retry_after if retry_after is not None else min(2 ** (strikes - 1), 30)
        self._back_off(now + max(wait, 0.05), "a 429")
        self.r.set(self._k("last_429"), now, ex=3600)

    def unreachable(self, turn: Turn) -> None:
        """No answer, or a 5xx, past the quick retries: the endpoint is down until a probe gets an answer."""
        now = self.now()
        if self.r.set(self._k("down_since"), now, nx=True) and self.outage_log is not None:
            self.outage_log.began(self.what, self.endpoint)
        failures = self.r.incr(self._k("failures"))
        limits = self.limits()
        self._back_off(now + min(limits.first_pause * 2 ** (failures - 1), limits.probe_max_seconds), "an outage")

    def _back_off(self, until: float, why: str) -> None:
        """Everyone waits until `until` (Redis's clock), unless a longer wait is in force already."""
        self.r.eval(_LATER, 1, self._k("backoff_until"), repr(until))
        log.info("%s %s: everyone waits until %.1f (%s)", self.what, self.endpoint, until, why)

    # -- what people see -------------------------------------------------------------
    def down_since(self) -> float | None:
        value = self.r.get(self._k("down_since"))
        return float(value) if value else None

    def waiting_words(self) -> str:
        down = self.down_since()
        if down is not None:
            return f"waiting for {self.what} since {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(down))}"
        return f"waiting for {self.what}'s rate limit"


# SET the key to ARGV[1] (kept a second past that time, by Redis's clock) only if it is later than what it holds
_LATER = """
local t = redis.call('TIME')
local later = tonumber(ARGV[1])
if tonumber(redis.call('GET', KEYS[1]) or '0') < later then
  local ttl = math.floor((later - tonumber(t[1]) - tonumber(t[2]) / 1000000) * 1000) + 1000
  redis.call('SET', KEYS[1], ARGV[1], 'PX', math.max(1, ttl))
end
return 0
"""

# The turn (`Governor._try`), one script so that a look and a slot cost one round trip. ARGV: the key prefix,
# the caller's token, OPENAI_RPM, OPENAI_TPM, OPENAI_MAX_CONCURRENCY (0: not set), a slot's lifetime (s), the
# probe's right's lifetime (ms). Answers {what, seconds to wait, limit}: "go", "probe", or what to wait for
# ("backoff", "down", "rpm", "tpm", "cap"). The per-minute counters' keys are named from Redis's own clock
# here, so they are not in KEYS: one Redis, not a cluster.
_TURN = """
local p = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local minute = math.floor(tonumber(t[1]) / 60)
local backoff = tonumber(redis.call('GET', p .. ':backoff_until') or '0')
if backoff > now then return {'backoff', tostring(backoff - now), 0} end
local answer = 'go'
if redis.call('EXISTS', p .. ':down_since') == 1 then
  if not redis.call('SET', p .. ':probe', '1', 'NX', 'PX', ARGV[7]) then return {'down', '0.5', 0} end
  answer = 'probe'
else
  local rest = tostring(60 * (minute + 1) - now)
  local rpm, tpm = tonumber(ARGV[3]), tonumber(ARGV[4])
  if rpm == 0 or tpm == 0 then
    local learned = redis.call('HMGET', p .. ':learned', 'rpm', 'tpm')
    if rpm == 0 then rpm = tonumber(learned[1] or '0') end
    if tpm == 0 then tpm = tonumber(learned[2] or '0') end
  end
  if rpm > 0 and tonumber(redis.call('GET', p .. ':rpm:' .. minute) or '0') >= rpm then return {'rpm', rest, rpm} end
  if tpm > 0 and tonumber(redis.call('GET', p .. ':tpm:' .. minute) or '0') > tpm then return {'tpm', rest, tpm} end
end
local inflight = p .. ':inflight'
redis.call('ZREMRANGEBYSCORE', inflight, '-inf', tostring(now))  -- slots of callers that died mid-call
local cap = tonumber(ARGV[5])
if cap > 0 and redis.call('ZCARD', inflight) >= cap then
  if answer == 'probe' then redis.call('DEL', p .. ':probe') end
  return {'cap', '0.1', cap}
end
redis.call('ZADD', inflight, tostring(now + tonumber(ARGV[6])), ARGV[2])
local counter = p .. ':rpm:' .. minute
redis.call('INCR', counter)
redis.call('EXPIRE', counter, 120)
return {answer, '0', 0}
"""

# The end of a call (`Governor._end`). ARGV: the key prefix, the token, 1 for a probe, 1 for an answer, its
# tokens, the learned requests and tokens per minute ('' when the headers said none). Answers Redis's time and
# 1 when the answer ended an outage (else 0).
_END = """
local p = ARGV[1]
local t = redis.call('TIME')
redis.call('ZREM', p .. ':inflight', ARGV[2])
if ARGV[3] == '1' then redis.call('DEL', p .. ':probe') end
local back = 0
if ARGV[4] == '1' then
  back = redis.call('DEL', p .. ':down_since')
  redis.call('DEL', p .. ':failures')
  if tonumber(ARGV[5]) > 0 then
    local counter = p .. ':tpm:' .. math.floor(tonumber(t[1]) / 60)
    redis.call('INCRBY', counter, ARGV[5])
    redis.call('EXPIRE', counter, 120)
  end
  if ARGV[6] ~= '' then redis.call('HSET', p .. ':learned', 'rpm', ARGV[6]) end
  if ARGV[7] ~= '' then redis.call('HSET', p .. ':learned', 'tpm', ARGV[7]) end
end
return {tostring(tonumber(t[1]) + tonumber(t[2]) / 1000000), back}
"""
_GOVERNORS: dict[tuple, Governor] = {}


def shared_governor(endpoint: str, *, what: str, limits: Callable[[], Limits]) -> Governor:
    """The governor of `endpoint` on REDIS_URL (one per process, Redis and endpoint); its outages are recorded
    (`outages.OutageLog`)."""
    import redis

    from ticketagent.outages import OutageLog

    config = (settings.REDIS_URL, endpoint)
    found = _GOVERNORS.get(config)
    if found is None:
        conn = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=5)
        found = _GOVERNORS[config] = Governor(conn, endpoint, what=what, limits=limits,
                                                       outage_log=OutageLog())
    return found


def governor_for(base_url: str | None, model: str) -> Governor:
    """The governor of a model API's endpoint and model."""
    return shared_governor(f"{base_url or 'https://api.openai.com/v1'}|{model}", what="the model API",
                           limits=model_limits)
