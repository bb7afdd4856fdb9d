"""Validation of HTTP write requests: a malformed one is answered 422 and recorded nowhere."""

from __future__ import annotations

import json
import re

__all__ = ["MAX_KEY_LEN", "STATUSES", "TICKET_RE", "ValidationError", "validate_write"]

STATUSES = ("open", "pending", "solved", "escalated", "on_hold")
TICKET_RE = re.compile(r"^[A-Za-z0-9._:/#-]{1,200}$")
EMAIL_RE = re.compile(
    r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*$"
)
MAX_KEY_LEN = 255


class ValidationError(Exception):
    """A request was malformed; answered with 422 and nothing recorded."""


def _require_str(body: dict, field: str, *, optional: bool = False, max_len: int = 100_000):
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


def _check_fields(endpoint: str, body: dict) -> None:
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
        if body.get("status") not in STATUSES:
            raise ValidationError(f"field 'status' must be one of {', '.join(STATUSES)}")
    elif endpoint == "close":
        _require_str(body, "reason", optional=True)
    elif endpoint == "escalate":
        _require_str(body, "note", optional=True)


def validate_write(endpoint: str, raw: bytes) -> dict:
    """Parse and validate a write body; returns the payload to store.

    Raises :class:`ValidationError`, or ``UnicodeDecodeError`` for a body
    that is not UTF-8.
    """
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
    _check_fields(endpoint, body)
    return body
