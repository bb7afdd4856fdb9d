"""Secret redaction: every text a channel returns is cleaned before it is stored, shown or exported.

An error message is stored (effect.last_error, the item's error, events),
shown (review queue) and exported (JSONL). A remote system may echo what it
received -- an `Authorization` header, a URL with a password -- so every
outcome text is redacted before it leaves the channel. The project may name
more secret settings in settings.SECRET_SETTINGS.
"""

import base64
import re
from urllib.parse import unquote, urlsplit

from django.conf import settings

REDACTED = "[redacted]"


_SECRET_SETTINGS = ("HELPDESK_TOKEN", "HELPDESK_PASSWORD", "EMAIL_HOST_PASSWORD", "HELPDESK_URL")


_MIN_SECRET_LENGTH = 6


_SECRET_PATTERNS = (
    # an echoed Authorization header, whatever its scheme
    (re.compile(r"""(?i)\b((?:proxy-)?authorization["']?\s*[:=]\s*["']?)(?:(?:bearer|basic|token)\s+)?[^\s"',;}]+"""),
     r"\1" + REDACTED),
    # a bearer token anywhere else in a message
    (re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{6,}"), "Bearer " + REDACTED),
    # OpenAI-style API keys, even ones this process does not know about
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), REDACTED),
    # a password inside any URL: scheme://user:password@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]*):[^\s/@]+@"), r"\1:" + REDACTED + "@"),
)


def _url_password(value: str) -> str:
    if "://" not in value:
        return ""
    try:
        return urlsplit(value).password or ""
    except ValueError:
        return ""


def _basic_credentials() -> set[str]:
    """What an `Authorization: Basic` header carries for the configured helpdesk user, base64-encoded:
    `{user}:{password}` and Zendesk's API-token form `{email}/token:{token}`. A server that echoes the
    header's value without its name would otherwise leak a usable credential."""
    user = getattr(settings, "HELPDESK_USER", "")
    if not isinstance(user, str) or not user:
        return set()
    pairs = []
    for name, form in (("HELPDESK_PASSWORD", "{user}:{secret}"), ("HELPDESK_TOKEN", "{user}/token:{secret}")):
        secret = getattr(settings, name, "")
        if isinstance(secret, str) and secret:
            pairs.append(form.format(user=user, secret=secret))
    encoded = {base64.b64encode(pair.encode()).decode() for pair in pairs}
    return encoded | {value.rstrip("=") for value in encoded}


def secret_values() -> list[str]:
    """The configured secrets (longest first), from settings at call time."""
    names = dict.fromkeys((*_SECRET_SETTINGS, *getattr(settings, "SECRET_SETTINGS", ())))
    found: set[str] = set()
    for name in names:
        value = getattr(settings, name, "")
        if not isinstance(value, str) or not value:
            continue
        password = _url_password(value)
        if password:
            found.update({password, unquote(password)})
        elif "://" not in value:
            found.add(value)
    found |= _basic_credentials()
    for db in getattr(settings, "DATABASES", {}).values():
        if db.get("PASSWORD"):
            found.add(str(db["PASSWORD"]))
    return sorted((v for v in found if len(v) >= _MIN_SECRET_LENGTH), key=len, reverse=True)


def redact(text: str) -> str:
    """`text` with every configured secret and credential-looking token replaced."""
    if not text or not isinstance(text, str):
        return text
    for secret in secret_values():
        if secret in text:
            text = text.replace(secret, REDACTED)
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text
