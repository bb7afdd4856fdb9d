"""Reading a received email as a delivery: its idempotency key (from the Message-ID), its ticket and its payload."""

from __future__ import annotations

import email.policy
from email.message import EmailMessage
from email.parser import BytesParser

__all__ = ["key_from_message_id", "parse_email"]


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


def _text(value: str) -> str:
    """Envelope text as JSON can store it: undecodable bytes become U+FFFD.

    The SMTP listener hands over command arguments decoded with
    ``surrogateescape``; a lone surrogate cannot be written to SQLite.
    """
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _header(msg: EmailMessage, name: str) -> str:
    try:
        value = msg.get(name)
    except Exception:  # noqa: BLE001 - malformed mail must not kill the session
        value = next((v for k, v in msg.raw_items() if k.lower() == name.lower()), None)
    return str(value).strip() if value is not None else ""


def _body(msg: EmailMessage, data: bytes) -> str:
    """The text/plain part, else the html one; newlines as ``\\n``."""
    body = ""
    try:
        part = msg.get_body(preferencelist=("plain", "html"))
        if part is not None:
            try:
                body = part.get_content()
            except Exception:  # noqa: BLE001 - malformed mail must not kill the session
                body = (part.get_payload(decode=True) or b"").decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - malformed mail must not kill the session
        body = data.decode("utf-8", "replace")
    # The wire format uses CRLF; store body text with plain newlines.
    return body.replace("\r\n", "\n")


def parse_email(data: bytes, mail_from: str, rcpts: list[str]) -> tuple[str, str, dict]:
    """Returns ``(key, ticket, payload)`` for a received message."""
    mail_from, rcpts = _text(mail_from or ""), [_text(r) for r in rcpts]
    payload: dict = {
        "envelope_from": mail_from,
        "to": rcpts,
        "message_id": "",
        "from": mail_from,
        "header_to": "",
        "cc": "",
        "subject": "",
        "body": "",
        "x_headers": {},
    }
    try:
        msg = BytesParser(policy=email.policy.default).parsebytes(data)
    except Exception:  # noqa: BLE001  # pragma: no cover - parser is very lenient
        payload["body"] = data.decode("utf-8", "replace")
        return "", "", payload
    payload["message_id"] = _header(msg, "Message-ID")
    payload["from"] = _header(msg, "From") or mail_from
    payload["header_to"] = _header(msg, "To")
    payload["cc"] = _header(msg, "Cc")
    payload["subject"] = _header(msg, "Subject")
    for name, _ in msg.raw_items():
        if name.lower().startswith("x-"):
            payload["x_headers"][name] = _header(msg, name)
    payload["body"] = _body(msg, data)
    ticket = _header(msg, "X-Ticket") or _header(msg, "X-Ticket-Id")
    return key_from_message_id(payload["message_id"]), ticket, payload
