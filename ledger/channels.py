"""Channel adapters: how an effect reaches the outside world.

Each channel declares its abilities (does it pass the idempotency key
downstream? can it look an effect up by key?) and classifies every
outcome strictly:

* committed - the system said yes;
* failed    - the answer proves nothing happened (connection refused
              before sending, a 4xx refusal);
* unknown   - anything else once the request may have left: timeouts,
              resets, 5xx, a dropped connection.
"""

import http.client
import json
import logging
import re
import smtplib
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

from django.conf import settings
from django.core.mail import BadHeaderError, EmailMessage, get_connection

from ledger.actions import ActionSpec
from ledger.models import EffectState

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- secrets
#
# An error message is stored (effect.last_error, the item's error, events),
# shown (review queue) and exported (JSONL). A remote system may echo what it
# received -- an `Authorization` header, a URL with a password -- so every
# outcome text is redacted before it leaves the channel. The project may name
# more secret settings in settings.SECRET_SETTINGS.

REDACTED = "[redacted]"
_SECRET_SETTINGS = ("HELPDESK_TOKEN", "EMAIL_HOST_PASSWORD", "HELPDESK_URL")
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


@dataclass(frozen=True)
class CallResult:
    state: str  # EffectState.COMMITTED / FAILED / UNKNOWN
    external_ref: str = ""
    error: str = ""

    def __post_init__(self):
        object.__setattr__(self, "error", redact(self.error))
        object.__setattr__(self, "external_ref", redact(self.external_ref))


@dataclass(frozen=True)
class LookupResult:
    found: bool | None  # None: the channel cannot tell
    external_ref: str = ""
    detail: str = ""

    def __post_init__(self):
        object.__setattr__(self, "detail", redact(self.detail))
        object.__setattr__(self, "external_ref", redact(self.external_ref))


class Channel:
    name = ""
    sends_key = False
    supports_lookup = False

    def perform(self, spec: ActionSpec, payload: dict, key: str) -> CallResult:
        raise NotImplementedError

    def lookup(self, key: str) -> LookupResult:
        return LookupResult(None, detail=f"the {self.name} channel has no look-up by key")


class HelpdeskChannel(Channel):
    """The helpdesk REST API; `Idempotency-Key` header; look-up by key."""

    name = "helpdesk"
    sends_key = True
    supports_lookup = True

    def __init__(self, base_url=None, token=None, connect_timeout=None, read_timeout=None):
        self.base_url = (base_url or settings.HELPDESK_URL).rstrip("/")
        self.token = token if token is not None else settings.HELPDESK_TOKEN
        self.connect_timeout = connect_timeout or settings.HELPDESK_CONNECT_TIMEOUT
        self.read_timeout = read_timeout or settings.HELPDESK_READ_TIMEOUT

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

    def _headers(self, key: str = "") -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key:
            headers["Idempotency-Key"] = key
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def perform(self, spec, payload, key):
        path = spec.path.format(ticket=quote(str(payload["ticket"]), safe=""))
        body = json.dumps(payload["body"]).encode()
        try:
            conn = self._connect()
        except OSError as exc:
            # Nothing left this process: the request was never sent.
            return CallResult(EffectState.FAILED, error=f"could not connect to the helpdesk: {exc}")
        try:
            conn.request(spec.method, urlsplit(self.base_url).path.rstrip("/") + path, body, self._headers(key))
            resp = conn.getresponse()
            status, text = resp.status, resp.read(64 * 1024).decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:
            return CallResult(EffectState.UNKNOWN, error=f"{type(exc).__name__} after sending: {exc}")
        finally:
            conn.close()
        if 200 <= status < 300:
            try:
                ref = str(json.loads(text).get("id", ""))
            except (ValueError, AttributeError):
                ref = ""
            return CallResult(EffectState.COMMITTED, external_ref=ref)
        if 400 <= status < 500 and status != 408:
            return CallResult(EffectState.FAILED, error=f"helpdesk refused with {status}: {text[:200]}")
        return CallResult(EffectState.UNKNOWN, error=f"helpdesk answered {status}: {text[:200]}")

    def lookup(self, key):
        try:
            conn = self._connect()
            conn.request("GET", urlsplit(self.base_url).path.rstrip("/") + f"/api/lookup/{quote(key)}",
                         headers=self._headers())
            resp = conn.getresponse()
            status, text = resp.status, resp.read(64 * 1024).decode("utf-8", "replace")
            conn.close()
        except (OSError, http.client.HTTPException) as exc:
            return LookupResult(None, detail=f"look-up failed: {type(exc).__name__}: {exc}")
        if status == 200:
            try:
                ref = str(json.loads(text).get("id", ""))
            except (ValueError, AttributeError):
                ref = ""
            return LookupResult(True, external_ref=ref, detail=f"found by key ({ref})")
        if status == 404:
            return LookupResult(False, detail="the helpdesk has no record of this key")
        return LookupResult(None, detail=f"look-up answered {status}")


class EmailChannel(Channel):
    """SMTP through Django's mail framework. The key becomes the Message-ID;
    SMTP has no look-up, so this channel's unknowns go to review."""

    name = "email"
    sends_key = True
    supports_lookup = False

    @property
    def max_call_seconds(self) -> float:
        return float(settings.EMAIL_TIMEOUT) * 2

    def perform(self, spec, payload, key):
        body = payload["body"]
        message = EmailMessage(
            subject=body["subject"], body=body["body"], from_email=settings.DEFAULT_FROM_EMAIL,
            to=[body["to"]], headers={"Message-ID": f"<{key}@{settings.MESSAGE_ID_DOMAIN}>",
                                      "X-Ticket": str(payload.get("ticket", ""))},
        )
        try:
            message.message()  # a header that cannot be sent fails here, before anything leaves
        except (BadHeaderError, ValueError) as exc:
            return CallResult(EffectState.FAILED, error=f"the message cannot be sent: {exc}")
        connection = get_connection(fail_silently=False, timeout=settings.EMAIL_TIMEOUT)
        try:
            connection.open()
        except OSError as exc:
            return CallResult(EffectState.FAILED, error=f"could not connect to the mail server: {exc}")
        try:
            connection.send_messages([message])
        except (smtplib.SMTPRecipientsRefused, smtplib.SMTPSenderRefused) as exc:
            return CallResult(EffectState.FAILED, error=f"mail server refused: {exc}")
        except smtplib.SMTPDataError as exc:
            # The server answered the message with an error code: not accepted.
            return CallResult(EffectState.FAILED, error=f"mail server refused the message: {exc}")
        except (TimeoutError, OSError, smtplib.SMTPException) as exc:
            return CallResult(EffectState.UNKNOWN, error=f"{type(exc).__name__} while sending: {exc}")
        finally:
            try:
                connection.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
        return CallResult(EffectState.COMMITTED, external_ref=f"<{key}@{settings.MESSAGE_ID_DOMAIN}>")


CHANNELS: dict[str, type[Channel]] = {"helpdesk": HelpdeskChannel, "email": EmailChannel}


def get_channel(name: str) -> Channel:
    try:
        return CHANNELS[name]()
    except KeyError:
        raise ValueError(f"unknown channel {name!r}") from None
