"""Rate limits: per-user budgets for uploads and actions, and the failed-login policy, counted by django-ratelimit.

django-ratelimit (``get_usage``) does the counting: one window per budget and
key (its windows are staggered by key), one atomic ``INCR`` per request in
Django's ``default`` cache, which settings point at the same Redis as the
queue (under a key prefix), so every web process on every host shares them.
This module says *what* is counted:

* ``upload``: POSTs to the upload page, per user (``RATE_LIMIT_UPLOADS_PER_MINUTE``);
* ``action``: every other state-changing request by a logged-in user
  (``RATE_LIMIT_ACTIONS_PER_MINUTE``);
* failed logins (successful ones are never counted), three ways:

  - ``login-client``: per client address, whatever the user names
    (``RATE_LIMIT_LOGINS_PER_CLIENT_PER_MINUTE``): one client trying many
    names (password spraying) is stopped;
  - ``login-name``: per user name, from every client that has not signed in
    as that name before (``RATE_LIMIT_LOGINS_PER_MINUTE``): guessing one
    account's password from many addresses is stopped;
  - ``login-device``: a browser that has signed in as that name before carries
    a signed cookie (``LOGIN_DEVICE_COOKIE``); its attempts are counted for that
    browser alone (the same limit) and are exempt from the two budgets above.
    So someone else's failures never lock the account's owner out of a
    browser they have used before; on a new browser the owner waits out the
    window (at most a minute), or an administrator runs
    ``manage.py login-unlock NAME`` (``unlock()``).

Why django-ratelimit and not django-axes for logins: axes locks out with one
failure limit for every parameter (no per-browser budget, so the owner is
locked out with everyone else), writes a database row per attempt and brings
its own tables and authentication backend; these counters are a minute long
and belong in Redis with the other budgets.

If the cache cannot be reached the request is let through and a warning is
logged (at most once a minute): a dashboard that refuses every click because
Redis restarted would be worse than a minute without limits.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import time
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import caches
from django_ratelimit.core import get_usage

log = logging.getLogger(__name__)

WINDOW_SECONDS = 60
LOGIN_DEVICE_COOKIE = "ticketagent_login_device"
LOGIN_DEVICE_SALT = "ticketagent.web.ratelimit.login-device"
LOGIN_DEVICE_MAX_AGE = 180 * 24 * 3600
_GENERATION_KEY = "ratelimit-generation:{scope}:{identity}"

_last_cache_warning = 0.0


@dataclass(frozen=True)
class Allowance:
    allowed: bool
    count: int
    limit: int
    retry_after: int  # seconds until the window resets (>= 1)


def limits() -> dict[str, int]:
    per_name = settings.RATE_LIMIT_LOGINS_PER_MINUTE
    return {
        "upload": settings.RATE_LIMIT_UPLOADS_PER_MINUTE,
        "action": settings.RATE_LIMIT_ACTIONS_PER_MINUTE,
        "login-client": settings.RATE_LIMIT_LOGINS_PER_CLIENT_PER_MINUTE,
        "login-name": per_name,
        "login-device": per_name,
    }


# --------------------------------------------------------------------------- who is counted


def user_identity(user) -> str:
    return f"user-{user.pk}"


def login_identity(username: str) -> str:
    """A user name (case-insensitive), hashed so the cache does not hold a list of guessed names."""
    digest = hashlib.sha256(username.strip().lower().encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return f"name-{digest}"


def client_address(request) -> str:
    """The client's address: REMOTE_ADDR, or with TRUST_X_FORWARDED_FOR the address the
    proxy in front appended to X-Forwarded-For (the right-most one; what a client
    writes there itself stays to its left)."""
    address = request.META.get("REMOTE_ADDR", "")
    if settings.TRUST_X_FORWARDED_FOR:
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        address = next((part for part in reversed(forwarded) if part), address)
    return address_identity(address)


def address_identity(address: str) -> str:
    """A client address as a budget's key; IPv6 clients count per /64 network (one host's usual share)."""
    try:
        ip = ipaddress.ip_address(address.strip().strip("[]"))
    except ValueError:
        return f"client-{address.strip()[:64] or 'unknown'}"
    if ip.version == 6:
        return f"client-{ipaddress.ip_network(f'{ip}/64', strict=False).network_address}"
    return f"client-{ip}"


def _trusted_device(request, username: str) -> str | None:
    """The browser's device id if it has signed in as `username` before, else None."""
    value = request.get_signed_cookie(LOGIN_DEVICE_COOKIE, default=None, salt=LOGIN_DEVICE_SALT,
                                      max_age=LOGIN_DEVICE_MAX_AGE)
    if not value:
        return None
    name, _, device = value.partition(":")
    return device if name == login_identity(username) and device else None


def _login_budgets(request, username: str) -> list[tuple[str, str]]:
    """(scope, identity) of every budget a login attempt for `username` counts against."""
    device = _trusted_device(request, username)
    if device:
        return [("login-device", f"device-{device}")]
    return [("login-client", client_address(request)), ("login-name", login_identity(username))]


# --------------------------------------------------------------------------- counting


def _cache_failed(exc: Exception) -> None:
    global _last_cache_warning
    now = time.monotonic()
    if now - _last_cache_warning > WINDOW_SECONDS:
        _last_cache_warning = now
        log.warning("rate limits are not enforced: the cache is unavailable (%s: %s)", type(exc).__name__, exc)


def _generation(scope: str, identity: str) -> str:
    """Bumped by unlock(): a fresh generation is a fresh counter."""
    return caches["default"].get(_GENERATION_KEY.format(scope=scope, identity=identity)) or "0"


def _usage(request, scope: str, identity: str, *, increment: bool) -> Allowance:
    limit = limits()[scope]
    try:
        value = f"{identity}:{_generation(scope, identity)}"
        usage = get_usage(request, group=scope, key=lambda group, request: value, rate=f"{limit}/m",
                          increment=increment)
    except Exception as exc:  # noqa: BLE001 - fail open, loudly
        _cache_failed(exc)
        return Allowance(True, 0, limit, 1)
    if usage is None:  # RATELIMIT_ENABLE is off
        return Allowance(True, 0, limit, 1)
    # the window ends after `time_left` seconds; the next one starts a second later
    count, retry_after = usage["count"], max(1, usage["time_left"] + 1)
    allowed = count <= limit if increment else count < limit
    return Allowance(allowed, count, limit, retry_after)


def hit(request, scope: str) -> Allowance:
    """Count one upload or action of the request's user; `allowed` is False once the budget is spent."""
    return _usage(request, scope, user_identity(request.user), increment=True)


def login_refusal(request, username: str) -> tuple[str, Allowance] | None:
    """The spent budget that refuses this login attempt, if any (nothing is counted)."""
    for scope, identity in _login_budgets(request, username):
        allowance = _usage(request, scope, identity, increment=False)
        if not allowance.allowed:
            return scope, allowance
    return None


def login_failed(request, username: str) -> None:
    for scope, identity in _login_budgets(request, username):
        _usage(request, scope, identity, increment=True)


def login_succeeded(request, response, username: str) -> None:
    """Remember this browser for `username` (a signed cookie), keeping its device id if it had one."""
    device = _trusted_device(request, username) or uuid.uuid4().hex
    response.set_signed_cookie(LOGIN_DEVICE_COOKIE, f"{login_identity(username)}:{device}", salt=LOGIN_DEVICE_SALT,
                               max_age=LOGIN_DEVICE_MAX_AGE, secure=settings.SESSION_COOKIE_SECURE, httponly=True,
                               samesite="Lax")


def unlock(*, username: str | None = None, client: str | None = None) -> list[str]:
    """Start fresh failed-login counters for a user name and/or a client address; returns what was reset."""
    targets = []
    if username:
        targets.append(("login-name", login_identity(username), f"user name {username!r}"))
    if client:
        targets.append(("login-client", address_identity(client), f"client address {client}"))
    for scope, identity, _ in targets:
        caches["default"].set(_GENERATION_KEY.format(scope=scope, identity=identity), uuid.uuid4().hex,
                              timeout=WINDOW_SECONDS * 2)
    return [label for _, _, label in targets]


MESSAGES = {
    "upload": "Too many uploads: the limit is {limit} a minute per user. Try again in {retry_after} s; "
              "nothing was uploaded.",
    "action": "Too many actions: the limit is {limit} a minute per user. Try again in {retry_after} s; "
              "nothing was changed.",
    "login-name": "Too many failed logins for this user name. Try again in {retry_after} s.",
    "login-client": "Too many failed logins from this address. Try again in {retry_after} s.",
    "login-device": "Too many failed logins for this user name from this browser. Try again in {retry_after} s.",
}


def message(scope: str, allowance: Allowance) -> str:
    return MESSAGES[scope].format(limit=allowance.limit, retry_after=allowance.retry_after)
