"""The model API's governor, shared by every worker through Redis: its rate limits, one back-off for all, its outages.

One governor per endpoint and model (`OPENAI_BASE_URL` + `OPENAI_MODEL`).
Before each request a caller waits for its turn (`Governor.turn()`):

- a shared back-off is in force -- a 429 told one worker to wait
  (`retry-after`), or the API said its remaining requests or tokens are
  0 until a reset (`x-ratelimit-*`): everyone waits it out;
- the endpoint is down (connections refused, timeouts, 5xx past
  `OPENAI_MAX_RETRIES` quick retries): everyone waits; one caller at a
  time probes it, with a back-off of 1, 2, 4 ... `MODEL_PROBE_MAX_SECONDS`
  seconds; the first answer ends the outage for all;
- requests and tokens per minute (`OPENAI_RPM`, `OPENAI_TPM`; empty: as the
  API's headers say) and calls in flight (`OPENAI_MAX_CONCURRENCY`).

A rate limit or an outage never fails an item: the caller waits, at most
`MODEL_WAIT_SECONDS`, then the item is handed back to the queue (not
failed) and waits there. Times are Redis's own clock (`TIME`), so hosts'
clocks do not matter. Nothing here is a source of truth: a flushed Redis
only forgets a back-off.
"""

import hashlib
import logging
import re
import secrets
import time
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

    def answered(self, headers=None, tokens: int = 0) -> None:
        self.governor.answered(self, headers or {}, tokens)

    def rate_limited(self, retry_after: float | None) -> None:
        self.governor.rate_limited(self, retry_after)

    def unreachable(self) -> None:
        self.governor.unreachable(self)


class Governor:
    """See the module docstring. Thread-safe: every method is a few Redis commands."""

    def __init__(self, redis_conn, endpoint: str):
        self.r = redis_conn
        self.key = "ticketagent:governor:" + hashlib.sha256(endpoint.encode()).hexdigest()[:16]
        self.endpoint = endpoint

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
        call's MODEL_WAIT_SECONDS, however many turns it takes); the slot is released however it ends."""
        turn = self._wait(give_up)
        try:
            yield turn
        finally:
            self.r.zrem(self._k("inflight"), turn.token)
            if turn.probing:
                self.r.delete(self._k("probe"))

    def _wait(self, give_up: float) -> Turn:
        token = secrets.token_hex(8)
        while True:
            pause, why = self._obstacle()
            if pause <= 0:
                probing = why == "probe"
                if self._take_slot(token):
                    return Turn(self, token, probing)
                if probing:
                    self.r.delete(self._k("probe"))
                pause, why = 0.1, "the calls in flight are at OPENAI_MAX_CONCURRENCY"
            left = give_up - time.monotonic()
            if left <= 0:
                raise Waited(why)
            if process_stopping():
                raise Waited(f"the worker is stopping ({why})")
            time.sleep(min(pause, left, 1.0))

    def _obstacle(self) -> tuple[float, str]:
        """What stands before a request now: (seconds to wait, why); (0, "probe") when this caller may
        probe a down endpoint, (0, "") when nothing does."""
        now = self.now()
        until, down = self.r.mget(self._k("backoff_until"), self._k("down_since"))
        if until and float(until) > now:
            return float(until) - now, self.waiting_words()
        if down:
            if self.r.set(self._k("probe"), "1", nx=True, px=int((settings.OPENAI_TIMEOUT + 5) * 1000)):
                return 0, "probe"
            return 0.5, self.waiting_words()
        minute = int(now // 60)
        rpm, tpm = self._limits()
        if rpm and int(self.r.get(self._k(f"rpm:{minute}")) or 0) >= rpm:
            return 60 * (minute + 1) - now, f"the requests of this minute reached OPENAI_RPM={rpm}"
        if tpm and int(self.r.get(self._k(f"tpm:{minute}")) or 0) > tpm:
            return 60 * (minute + 1) - now, f"the tokens of this minute reached OPENAI_TPM={tpm}"
        return 0, ""

    def _limits(self) -> tuple[int, int]:
        rpm, tpm = settings.OPENAI_RPM, settings.OPENAI_TPM
        if rpm and tpm:
            return rpm, tpm
        learned = self.r.hmget(self._k("learned"), "rpm", "tpm")
        return rpm or int(learned[0] or 0), tpm or int(learned[1] or 0)

    def _take_slot(self, token: str) -> bool:
        """A place among the calls in flight (OPENAI_MAX_CONCURRENCY), and this request counted in its minute."""
        now = self.now()
        inflight = self._k("inflight")
        pipe = self.r.pipeline()
        pipe.zremrangebyscore(inflight, "-inf", now)  # slots of callers that died mid-call expire
        pipe.zadd(inflight, {token: now + settings.OPENAI_TIMEOUT + 5})
        pipe.zcard(inflight)
        _, _, taken = pipe.execute()
        cap = settings.OPENAI_MAX_CONCURRENCY
        if cap and taken > cap:
            self.r.zrem(inflight, token)
            return False
        counter = self._k(f"rpm:{int(now // 60)}")
        self.r.pipeline().incr(counter).expire(counter, 120).execute()
        return True

    # -- what the answer said --------------------------------------------------------
    def answered(self, turn: Turn, headers, tokens: int) -> None:
        """An answer came (any status but 429 and 5xx): the endpoint is up; tokens counted; limits learned."""
        now = self.now()
        pipe = self.r.pipeline()
        pipe.delete(self._k("down_since"), self._k("failures"))
        if tokens:
            counter = self._k(f"tpm:{int(now // 60)}")
            pipe.incrby(counter, tokens).expire(counter, 120)
        pipe.execute()
        self._learn(headers, now)

    def _learn(self, headers, now: float) -> None:
        """The API's `x-ratelimit-*` headers: its limits (when OPENAI_RPM/TPM are empty), and a shared wait
        when it says nothing remains until a reset."""
        get = headers.get
        learned = {name: int(get(f"x-ratelimit-limit-{kind}")) for name, kind in (("rpm", "requests"),
                                                                                  ("tpm", "tokens"))
                   if str(get(f"x-ratelimit-limit-{kind}") or "").isdigit()}
        if learned:
            self.r.hset(self._k("learned"), mapping=learned)
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
        self.r.set(self._k("down_since"), now, nx=True)
        failures = self.r.incr(self._k("failures"))
        self._back_off(now + min(2 ** (failures - 1), settings.MODEL_PROBE_MAX_SECONDS), "an outage")

    def _back_off(self, until: float, why: str) -> None:
        """Everyone waits until `until` (Redis's clock), unless a longer wait is in force already."""
        self.r.eval(_LATER, 1, self._k("backoff_until"), repr(until),
                    max(1, int((until - self.now()) * 1000) + 1000))
        log.info("model API %s: everyone waits until %.1f (%s)", self.endpoint, until, why)

    # -- what people see -------------------------------------------------------------
    def down_since(self) -> float | None:
        value = self.r.get(self._k("down_since"))
        return float(value) if value else None

    def waiting_words(self) -> str:
        down = self.down_since()
        if down is not None:
            return f"waiting for the model API since {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(down))}"
        return "waiting for the model API's rate limit"


# SET the key to ARGV[1] (with a lifetime of ARGV[2] ms) only if it is later than what the key holds
_LATER = ("if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then "
          "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end return 0")
_GOVERNORS: dict[tuple, Governor] = {}


def governor_for(base_url: str | None, model: str) -> Governor:
    """The governor of an endpoint and model, on REDIS_URL (one per process and configuration)."""
    import redis

    config = (settings.REDIS_URL, base_url or "https://api.openai.com/v1", model)
    found = _GOVERNORS.get(config)
    if found is None:
        conn = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=5)
        found = _GOVERNORS[config] = Governor(conn, f"{config[1]}|{model}")
    return found
