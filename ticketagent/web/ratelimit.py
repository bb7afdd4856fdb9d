"""Per-user rate limits, counted in Django's cache (Redis in production).

Three budgets, each a fixed one-minute window:

* ``upload``: POSTs to the upload page, per user (``RATE_LIMIT_UPLOADS_PER_MINUTE``);
* ``action``: every other state-changing request (POST, PUT, PATCH, DELETE) by a
  logged-in user (``RATE_LIMIT_ACTIONS_PER_MINUTE``);
* ``login``: *failed* logins per submitted user name (``RATE_LIMIT_LOGINS_PER_MINUTE``),
  so guessing one account's password is slow while successful logins are never
  counted.

The counters live in the ``default`` cache, which settings point at the same
Redis as the queue (under a key prefix), so every web process on every host
shares them. A fixed window allows at most twice the budget across a window
boundary; that is the price of one atomic ``INCR`` per request.

If the cache cannot be reached the request is let through and a warning is
logged (at most once a minute): a dashboard that refuses every click because
Redis restarted would be worse than a minute without limits.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import caches

log = logging.getLogger(__name__)

WINDOW_SECONDS = 60
KEY_PREFIX = "ratelimit"

_last_cache_warning = 0.0


@dataclass(frozen=True)
class Allowance:
    allowed: bool
    count: int
    limit: int
    retry_after: int  # seconds until the window resets (>= 1)


def limits() -> dict[str, int]:
    return {
        "upload": settings.RATE_LIMIT_UPLOADS_PER_MINUTE,
        "action": settings.RATE_LIMIT_ACTIONS_PER_MINUTE,
        "login": settings.RATE_LIMIT_LOGINS_PER_MINUTE,
    }


def user_identity(user) -> str:
    return f"user-{user.pk}"


def login_identity(username: str) -> str:
    """Failed logins are counted per user name (case-insensitive), hashed so
    the cache does not hold a list of guessed names."""
    digest = hashlib.sha256(username.strip().lower().encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return f"name-{digest}"


def _window(now: float) -> tuple[int, int]:
    index = int(now // WINDOW_SECONDS)
    retry_after = max(1, math.ceil((index + 1) * WINDOW_SECONDS - now))
    return index, retry_after


def _key(scope: str, identity: str, index: int) -> str:
    return f"{KEY_PREFIX}:{scope}:{identity}:{index}"


def _cache():
    return caches[getattr(settings, "RATE_LIMIT_CACHE", "default")]


def _cache_failed(exc: Exception) -> None:
    global _last_cache_warning
    now = time.monotonic()
    if now - _last_cache_warning > WINDOW_SECONDS:
        _last_cache_warning = now
        log.warning("rate limits are not enforced: the cache is unavailable (%s: %s)", type(exc).__name__, exc)


def hit(scope: str, identity: str, *, now: float | None = None) -> Allowance:
    """Count one request against the budget; `allowed` is False once it is spent."""
    limit = limits()[scope]
    index, retry_after = _window(time.time() if now is None else now)
    key = _key(scope, identity, index)
    cache = _cache()
    try:
        cache.add(key, 0, timeout=WINDOW_SECONDS + 5)
        try:
            count = cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, timeout=WINDOW_SECONDS + 5)
            count = 1
    except Exception as exc:  # noqa: BLE001 - fail open, loudly
        _cache_failed(exc)
        return Allowance(True, 0, limit, retry_after)
    return Allowance(count <= limit, count, limit, retry_after)


def peek(scope: str, identity: str, *, now: float | None = None) -> Allowance:
    """The budget's state without counting (used for failed logins: only failures count)."""
    limit = limits()[scope]
    index, retry_after = _window(time.time() if now is None else now)
    try:
        count = int(_cache().get(_key(scope, identity, index)) or 0)
    except Exception as exc:  # noqa: BLE001 - fail open, loudly
        _cache_failed(exc)
        return Allowance(True, 0, limit, retry_after)
    return Allowance(count < limit, count, limit, retry_after)


def reset(scope: str, identity: str, *, now: float | None = None) -> None:
    index, _ = _window(time.time() if now is None else now)
    try:
        _cache().delete(_key(scope, identity, index))
    except Exception as exc:  # noqa: BLE001
        _cache_failed(exc)


MESSAGES = {
    "upload": "Too many uploads: the limit is {limit} a minute per user. Try again in {retry_after} s; "
              "nothing was uploaded.",
    "action": "Too many actions: the limit is {limit} a minute per user. Try again in {retry_after} s; "
              "nothing was changed.",
    "login": "Too many failed logins for this user name. Try again in {retry_after} s.",
}


def message(scope: str, allowance: Allowance) -> str:
    return MESSAGES[scope].format(limit=allowance.limit, retry_after=allowance.retry_after)
