"""Web-facing security plumbing: request size cap, rate limits, the
Content-Security-Policy header, and secret redaction for logs and error pages.

Nothing here imports models at import time: the logging filter is built while
Django configures logging, before the app registry is ready.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.http import HttpResponse
from django.utils.html import escape
from django.views.debug import ExceptionReporter, SafeExceptionReporterFilter

from ledger.channels.redact import redact
from ticketagent.web import ratelimit

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


def _redact(text: str) -> str:
    return redact(text)


def _plain_answer(request, status: int, message: str, title: str) -> HttpResponse:
    """A short, clear refusal. htmx shows the text in the page's #flash box;
    a browser without JavaScript gets a minimal page with a way back."""
    if request.headers.get("HX-Request") == "true":
        return HttpResponse(message + "\n", status=status, content_type="text/plain; charset=utf-8")
    body = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title></head>'
            f'<body><h1>{escape(title)}</h1><p role="alert">{escape(message)}</p>'
            f'<p><a href="/">Back to the tasks</a></p></body></html>')
    return HttpResponse(body, status=status, content_type="text/html; charset=utf-8")


# --------------------------------------------------------------------------- request size


class RequestSizeLimitMiddleware:
    """Refuse a request body larger than REQUEST_MAX_BYTES before anything reads it.

    Django's DATA_UPLOAD_MAX_MEMORY_SIZE does not count uploaded files (they
    stream to a temporary file of any size), so without this a multi-gigabyte
    "upload" would be written to disk before the view could say no. Must sit
    before CsrfViewMiddleware, which reads request.POST.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method not in SAFE_METHODS:
            raw = request.META.get("CONTENT_LENGTH") or "0"
            limit = settings.REQUEST_MAX_BYTES
            try:
                length = int(raw)
            except ValueError:
                return _plain_answer(request, 400, f"Bad request: Content-Length {raw[:40]!r} is not a number.",
                                     "Bad request")
            if length < 0:
                return _plain_answer(request, 400, "Bad request: negative Content-Length.", "Bad request")
            if length > limit:
                return _plain_answer(
                    request, 413,
                    f"Request too large: {length / 1e6:.1f} MB; the limit is {limit / 1e6:.1f} MB "
                    f"(upload files up to {settings.UPLOAD_MAX_BYTES / 1e6:.1f} MB). Nothing was changed.",
                    "Request too large")
        return self.get_response(request)


# --------------------------------------------------------------------------- rate limits


def _scope(request) -> str | None:
    match = request.resolver_match
    name = match.url_name if match else None
    namespace = match.namespace if match else ""
    if name == "login" and namespace in ("", "admin"):
        return "login"
    if not request.user.is_authenticated:
        return None  # the view sends anonymous users to the login page
    if name == "upload" and namespace == "":
        return "upload"
    return "action"


class RateLimitMiddleware:
    """Per-user budgets for uploads and actions, and for failed logins per
    user name (ticketagent.web.ratelimit). Over budget: 429 with Retry-After and
    a message saying what to do. Sits after CsrfViewMiddleware, so a forged
    request is refused (403) before it spends anyone's budget."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        login_identity = getattr(request, "_ratelimit_login_identity", None)
        if login_identity and response.status_code == 200:
            # The login form came back: the attempt failed. Count it.
            ratelimit.hit("login", login_identity)
        return response

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.method in SAFE_METHODS:
            return None
        scope = _scope(request)
        if scope is None:
            return None
        if scope == "login":
            username = request.POST.get("username", "")
            if not username:
                return None
            identity = ratelimit.login_identity(username)
            allowance = ratelimit.peek("login", identity)
            if not allowance.allowed:
                return self.refuse(request, "login", allowance)
            request._ratelimit_login_identity = identity
            return None
        allowance = ratelimit.hit(scope, ratelimit.user_identity(request.user))
        if not allowance.allowed:
            return self.refuse(request, scope, allowance)
        return None

    @staticmethod
    def refuse(request, scope, allowance):
        response = _plain_answer(request, 429, ratelimit.message(scope, allowance), "Too many requests")
        response["Retry-After"] = str(allowance.retry_after)
        return response


# --------------------------------------------------------------------------- CSP


class ContentSecurityPolicyMiddleware:
    """Sends CONTENT_SECURITY_POLICY on our pages: only our own scripts run,
    so even markup that slipped past escaping could not execute. The admin and
    the RQ dashboard (staff only, third-party templates with inline scripts)
    are left alone."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        policy = settings.CONTENT_SECURITY_POLICY
        if policy and "Content-Security-Policy" not in response and not any(
                request.path.startswith(p) for p in settings.CONTENT_SECURITY_POLICY_EXEMPT):
            response["Content-Security-Policy"] = policy
        return response


# --------------------------------------------------------------------------- secrets


class RedactSecretsFilter(logging.Filter):
    """A logging filter for every handler: configured secrets (API keys,
    tokens, passwords, passwords in URLs) and bearer tokens are replaced by
    "[redacted]" in the message, its arguments and the formatted traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string is logging's problem, not ours
            return True
        clean = _redact(message)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = _redact(record.exc_text)
        if record.stack_info:
            record.stack_info = _redact(record.stack_info)
        return True


class _Redacted:
    """A frame variable shown on the debug page through its redacted repr."""

    def __init__(self, value):
        try:
            text = repr(value)
        except Exception as exc:  # noqa: BLE001
            text = f"<repr failed: {type(exc).__name__}>"
        self.text = _redact(text)

    def __repr__(self):
        return self.text


class RedactingExceptionReporterFilter(SafeExceptionReporterFilter):
    """Django hides settings named like *KEY*, *TOKEN*, *PASS*; this also hides
    passwords inside URLs (DATABASE_URL, REDIS_URL, ...) and any configured
    secret wherever it turns up, in settings and in traceback variables."""

    def cleanse_setting(self, key, value):
        cleansed = super().cleanse_setting(key, value)
        return _redact(cleansed) if isinstance(cleansed, str) else cleansed

    def get_traceback_frame_variables(self, request, tb_frame):
        return [(name, _Redacted(value)) for name, value in super().get_traceback_frame_variables(request, tb_frame)]


class RedactingExceptionReporter(ExceptionReporter):
    """The DEBUG error page and error e-mails, with secrets redacted from the
    finished text (exception messages included)."""

    def get_traceback_html(self):
        return _redact(super().get_traceback_html())

    def get_traceback_text(self):
        return _redact(super().get_traceback_text())
