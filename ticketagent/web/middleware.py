"""Web-facing security plumbing: the request body's guards, rate limits, and secret redaction for logs and error pages.

The Content-Security-Policy header comes from django-csp (settings); the
queue's operator check from ticketagent.web.queue_guard. Nothing here imports
models at import time: the logging filter is built while Django configures
logging, before the app registry is ready.
"""

from __future__ import annotations

import logging
import re

from django.conf import settings
from django.http import HttpResponse, UnreadablePostError
from django.http.multipartparser import MultiPartParserError
from django.urls import reverse
from django.utils.html import escape
from django.views.debug import ExceptionReporter, SafeExceptionReporterFilter

from ledger.channels.redact import redact
from ticketagent.upload.rows import MAX_FILENAME_CHARS, human_size, long_filename_message
from ticketagent.web import ratelimit

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
# htmx swaps these into the form's target (base.html's htmx-config); a short refusal goes to #flash instead
_SWAPPED_BY_HTMX = frozenset({400, 409, 422})


def _redact(text: str) -> str:
    return redact(text)


def plain_answer(request, status: int, message: str, title: str) -> HttpResponse:
    """A short, clear refusal. htmx shows the text in the page's #flash box;
    a browser without JavaScript gets a minimal page with a way back."""
    if request.headers.get("HX-Request") == "true":
        if status in _SWAPPED_BY_HTMX:
            response = HttpResponse(f'<div id="flash" role="alert" aria-live="assertive">{escape(message)}</div>',
                                    status=status, content_type="text/html; charset=utf-8")
            response["HX-Retarget"], response["HX-Reswap"] = "#flash", "outerHTML"
            return response
        return HttpResponse(message + "\n", status=status, content_type="text/plain; charset=utf-8")
    body = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title></head>'
            f'<body><h1>{escape(title)}</h1><p role="alert">{escape(message)}</p>'
            f'<p><a href="/">Back to the tasks</a></p></body></html>')
    return HttpResponse(body, status=status, content_type="text/html; charset=utf-8")


# --------------------------------------------------------------------------- the request body

_FILENAME = re.compile(rb'filename="([^"\r\n]*)"')


class RequestSizeLimitMiddleware:
    """The request body, before anything else reads it: not larger than
    REQUEST_MAX_BYTES, as long as its Content-Length says, and a form Django can parse.

    * Over REQUEST_MAX_BYTES: 413 before the body is read. Django's
      DATA_UPLOAD_MAX_MEMORY_SIZE does not count uploaded files (they stream to
      a temporary file of any size).
    * Shorter than its Content-Length (the client stopped sending, or the
      connection broke): 400, and nothing is parsed -- a multipart body cut
      short still parses, as the rows that arrived.
    * A file name over MAX_FILENAME_CHARS (255): 400 with the parser's words.
      Django would cut it to 255 characters, or refuse the whole form with a
      bare "Bad Request (400)" once the part's headers pass 1,024 bytes.

    Reading the whole body here costs memory up to REQUEST_MAX_BYTES per
    request; uploads are held in memory anyway (FILE_UPLOAD_MAX_MEMORY_SIZE).
    Two Content-Length headers never reach Django under the production server
    (gunicorn refuses them with 400); Django's development server keeps the first.
    Must sit before CsrfViewMiddleware, which reads request.POST.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method not in SAFE_METHODS:
            refusal = self.check(request)
            if refusal is not None:
                return refusal
        return self.get_response(request)

    def check(self, request) -> HttpResponse | None:
        raw = request.META.get("CONTENT_LENGTH") or "0"
        try:
            length = int(raw)
        except ValueError:
            return plain_answer(request, 400, f"Bad request: Content-Length {raw[:40]!r} is not a number.",
                                "Bad request")
        if length < 0:
            return plain_answer(request, 400, "Bad request: negative Content-Length.", "Bad request")
        if length > settings.REQUEST_MAX_BYTES:
            return plain_answer(request, 413, self.too_large(request, length), "Request too large")
        try:
            body = request.body
        except UnreadablePostError:
            body = b""
        if len(body) != length:
            return plain_answer(
                request, 400, f"Bad request: the request body ended after {len(body):,} of the {length:,} bytes "
                              "it announced (the connection was interrupted). Nothing was changed; try again.",
                "Bad request")
        longest = max((len(name.decode("utf-8", "replace")) for name in _FILENAME.findall(body[:65536])), default=0)
        if longest > MAX_FILENAME_CHARS and request.content_type == "multipart/form-data":
            # Django would cut the name to 255 characters (over ~950 it refuses the whole form): the same
            # words as the parser's instead, whatever the length.
            return plain_answer(request, 400, long_filename_message(longest) + ". Nothing was uploaded.",
                                "Bad request")
        try:
            request.POST  # noqa: B018 - parsed here, where a refusal can still be put in words
        except MultiPartParserError as exc:
            return plain_answer(request, 400, f"Bad request: the form could not be read ({exc}). Nothing was "
                                              "changed.", "Bad request")
        return None

    @staticmethod
    def too_large(request, length: int) -> str:
        if request.path_info == reverse("upload"):
            return (f"Request too large: {human_size(length)}; the limit for an uploaded file is "
                    f"{human_size(settings.UPLOAD_MAX_BYTES)}. Nothing was changed.")
        return (f"Request too large: {human_size(length)}; the limit is {human_size(settings.REQUEST_MAX_BYTES)}. "
                "Nothing was changed.")


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
    """Per-user budgets for uploads and actions, and the failed-login policy
    (ticketagent.web.ratelimit). Over budget: 429 with Retry-After and a
    message saying what to do. Sits after CsrfViewMiddleware, so a forged
    request is refused (403) before it spends anyone's budget."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        username = getattr(request, "ratelimit_login_username", None)
        if username:
            if response.status_code == 200:
                ratelimit.login_failed(request, username)  # the login form came back: the attempt failed
            elif response.status_code == 302 and request.user.is_authenticated:
                ratelimit.login_succeeded(request, response, username)
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
            refusal = ratelimit.login_refusal(request, username)
            if refusal is not None:
                return self.refuse(request, *refusal)
            request.ratelimit_login_username = username
            return None
        allowance = ratelimit.hit(request, scope)
        if not allowance.allowed:
            return self.refuse(request, scope, allowance)
        return None

    @staticmethod
    def refuse(request, scope, allowance):
        response = plain_answer(request, 429, ratelimit.message(scope, allowance), "Too many requests")
        response["Retry-After"] = str(allowance.retry_after)
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


class FreshCountsAfterChangesMiddleware:
    """After a person's change (a POST that succeeded), the pages' counts are counted again: the health
    numbers' snapshot, which the header and the tiles read, is forgotten (`health.health_numbers_forget`)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if request.method not in SAFE_METHODS and response.status_code < 400:
            # imported here: the logging settings import this module before the apps (and models) load
            from ticketagent.health import health_numbers_forget

            health_numbers_forget()
        return response
