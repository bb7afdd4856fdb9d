"""Secrets never appear in events, ledger rows, item errors, logs, pages,
exports or error pages.

A run with known fake secrets -- the OpenAI key (against real HTTP servers
through the official SDK), the helpdesk token, the SMTP password, the metrics
token and a database password -- including the failures most likely to leak
them: a model API that answers 401 quoting the Authorization header it got, a
helpdesk that refuses (422) or fails (503) echoing the request headers, a
look-up that fails the same way, an SMTP server that refuses to authenticate.
Then everything a person or a log file can see is scanned for the secrets.
"""

from __future__ import annotations

import io
import json
import logging
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import serializers
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from ledger.models import BlockedDuplicate, Effect, EffectState, EffectTransition
from ticketagent.models import Blob, Checkpoint, Event, Item, ItemStatus, Task
from ticketagent.pipeline.run import item_process
from ticketagent.web.middleware import RedactSecretsFilter

pytestmark = pytest.mark.django_db(transaction=True)


def _secret(prefix: str) -> str:
    return f"{prefix}-SECRET-{secrets.token_hex(12)}"


class Secrets:
    def __init__(self):
        self.openai = _secret("sk-test")
        self.helpdesk = _secret("hd")
        self.smtp = _secret("smtp")
        self.metrics = _secret("metrics")
        self.db = _secret("db")

    def all(self) -> dict[str, str]:
        return {"OPENAI_API_KEY": self.openai, "HELPDESK_TOKEN": self.helpdesk, "EMAIL_HOST_PASSWORD": self.smtp,
                "METRICS_TOKEN": self.metrics, "database password": self.db}

    def leaks(self, text: str, where: str) -> list[str]:
        """Each secret, or its random core (a partly masked key still leaks), found in `text`."""
        found = []
        for name, value in self.all().items():
            core = value.rsplit("-", 1)[1]
            if value in text or core in text or core[:12] in text:
                found.append(f"{name} in {where}")
        return found


class _Hostile(BaseHTTPRequestHandler):
    """A helpdesk (and a model API) that quote the request's headers back in every error."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _echo(self) -> dict:
        headers = {"authorization": self.headers.get("Authorization", "")}
        headers.update({k: v for k, v in self.headers.items()})
        return {"error": "refused", "you_sent": headers}

    def _handle(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.received.append({"path": self.path, "body": body.decode("utf-8", "replace")})
        path = self.path
        if path.endswith("/chat/completions"):
            auth = self.headers.get("Authorization", "")
            return self._answer(401, {"error": {"message": f"Incorrect API key provided: {auth[7:]}",
                                                "type": "invalid_request_error", "code": "invalid_api_key",
                                                "headers": self._echo()["you_sent"]}})
        if path.endswith("/draft") or path.endswith("/status"):
            return self._answer(200, {"id": "ref-1"})
        if path.startswith("/api/tickets/SEC-2/notify"):
            return self._answer(503, self._echo())
        if path.startswith("/api/tickets/SEC-3/notify"):
            return self._answer(422, self._echo())
        if path.startswith("/api/lookup/0000-helpdesk-probe"):  # after SEC-2's 503 it is probed, and answers
            return self._answer(404, self._echo())
        if path.startswith("/api/lookup/"):
            return self._answer(500, self._echo())
        return self._answer(404, self._echo())

    do_GET = do_POST = do_PUT = _handle


@pytest.fixture
def hostile_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    server.received = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def s(settings):
    known = Secrets()
    settings.HELPDESK_TOKEN = known.helpdesk
    settings.EMAIL_HOST_USER = "mailer"
    settings.EMAIL_HOST_PASSWORD = known.smtp
    settings.METRICS_TOKEN = known.metrics
    settings.DATABASE_URL = f"postgres://app:{known.db}@db.internal:5432/ticketagent"
    return known


@pytest.fixture
def log_output():
    """What the configured log handlers write (their filters and formatters applied)."""
    handlers = [h for h in logging.getLogger().handlers if any(isinstance(f, RedactSecretsFilter) for f in h.filters)]
    assert handlers, "the root logger has no handler with the redaction filter (settings.LOGGING)"
    buffer = io.StringIO()
    old = [h.setStream(buffer) for h in handlers]
    yield buffer
    for handler, stream in zip(handlers, old, strict=True):
        handler.setStream(stream)


def test_every_configured_log_handler_redacts(settings):
    for name, handler in settings.LOGGING["handlers"].items():
        assert "redact_secrets" in handler.get("filters", []), f"log handler {name!r} has no redaction filter"


def _csv(*rows) -> bytes:
    lines = ["ticket_id,customer_email,subject,body"] + [f"{t},{t.lower()}@example.com,Refund,Please refund {t}"
                                                           for t in rows]
    return ("\n".join(lines) + "\n").encode()


def _dump_tables() -> str:
    parts = []
    for model in (Task, Item, Checkpoint, Event, Blob, Effect, EffectTransition, BlockedDuplicate):
        parts.append(serializers.serialize("json", model.objects.all()))
    return "\n".join(parts)


def test_a_run_with_failing_calls_leaks_no_secret(client, alice, settings, s, openai_server, hostile_server,
                                                  sandbox, queue, caplog, log_output):
    caplog.set_level(logging.DEBUG)
    openai_server.api_key = s.openai  # the fake model API accepts only the real (fake) key
    settings.OPENAI_API_KEY = s.openai
    settings.HELPDESK_URL = hostile_server.url
    client.force_login(alice)

    def upload(data, name, channel):
        response = client.post(reverse("upload"), {"file": SimpleUploadedFile(name, data), "notify_channel": channel,
                                                   "failure_threshold": 10})
        assert response.status_code == 302, response.content[:500]
        return Task.objects.get(source_filename=name)

    task = upload(_csv("SEC-1", "SEC-2", "SEC-3"), "secrets.csv", "helpdesk")
    mail_task = upload(_csv("SEC-4"), "secrets-mail.csv", "email")
    try:
        # SEC-1: the model API refuses the key and quotes it back (401)
        settings.OPENAI_BASE_URL = hostile_server.url + "/v1"
        item = task.items.get(ticket_id="SEC-1")
        item_process(item_id=item.pk, attempt=item.attempt)
        settings.OPENAI_BASE_URL = openai_server.base_url
        # SEC-2: the helpdesk fails (503) echoing the headers -> unknown; SEC-3: refuses (422) -> failed;
        # SEC-4: the SMTP server will not authenticate (the password is set) -> failed
        for item in [*task.items.exclude(ticket_id="SEC-1").order_by("row"), mail_task.items.get()]:
            item_process(item_id=item.pk, attempt=item.attempt)
    finally:
        openai_server.api_key = "sk-test-fake-key"

    items = {i.ticket_id: i for i in Item.objects.all()}
    assert (items["SEC-1"].status, items["SEC-1"].failure_kind) == (ItemStatus.FAILED, "auth")
    assert items["SEC-2"].status == ItemStatus.WAITING_REVIEW
    assert (items["SEC-3"].status, items["SEC-3"].failure_kind) == (ItemStatus.FAILED, "helpdesk_refused")
    assert (items["SEC-4"].status, items["SEC-4"].failure_kind) == (ItemStatus.FAILED, "email_refused")
    refused = Effect.objects.get(owner_item=items["SEC-3"].ref, owner_step="notify_customer")
    assert refused.state == EffectState.FAILED and "\"authorization\": \"[redacted]\"" in refused.last_error, refused.last_error
    assert "you_sent" in refused.last_error  # the helpdesk's answer is kept, minus the secret

    # an operator reconciles the unknown effect: the look-up fails echoing the headers too
    unknown = Effect.objects.get(state=EffectState.UNKNOWN)
    assert client.post(reverse("effect-reconcile", args=[unknown.pk])).status_code == 302

    leaks: list[str] = []
    leaks += s.leaks(_dump_tables(), "the database (events, effects, transitions, items, checkpoints, blobs)")
    pages = [reverse("tasks"), reverse("review"), reverse("effect-classes"), reverse("upload"),
             *(reverse("task-detail", args=[t.pk]) for t in (task, mail_task)),
             *(reverse("item-detail", args=[i.pk]) for i in items.values())]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        leaks += s.leaks(response.content.decode(), url)
    for t in (task, mail_task):
        response = client.get(reverse("task-events", args=[t.pk]))
        leaks += s.leaks(b"".join(response.streaming_content).decode(), f"the JSONL export of task {t.pk}")
    metrics = Client().get("/metrics", headers={"Authorization": f"Bearer {s.metrics}"})
    assert metrics.status_code == 200
    leaks += s.leaks(metrics.content.decode(), "/metrics")
    # the model never sees a credential; the helpdesk gets its token only in the header
    leaks += s.leaks(json.dumps([r["body"] for r in openai_server.requests]), "prompts sent to the model")
    leaks += s.leaks(json.dumps([r["body"] for r in hostile_server.received]), "request bodies sent to the helpdesk")
    # logs: every record as emitted (DEBUG, the SDK's and httpx's included) and what the handlers wrote
    records = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    leaks += s.leaks(records, "log records")
    leaks += s.leaks(log_output.getvalue(), "the log output")
    assert not leaks, leaks
    assert caplog.records and any(r.name.startswith(("openai", "httpx")) for r in caplog.records), \
        "the SDK's own debug logging was captured too"


@pytest.mark.parametrize("debug", [False, True])
def test_error_pages_and_error_logs_leak_no_secret(client, alice, settings, s, monkeypatch, log_output, debug):
    """A bug whose exception message carries secrets: the 500 page (the product's own, DEBUG on or off: no
    technical page with settings and local variables) and the logged traceback show none of them."""
    settings.OPENAI_API_KEY = s.openai
    settings.DEBUG = debug

    def explode(*args, **kwargs):
        helpdesk_headers = {"Authorization": f"Bearer {s.helpdesk}"}  # a local variable the debug page lists
        raise RuntimeError(f"boom: key={s.openai} headers={helpdesk_headers} smtp={s.smtp} "
                           f"db=postgres://app:{s.db}@db.internal/ticketagent")

    monkeypatch.setattr("ticketagent.web.review.selectors_review.review_unknown", explode)
    client.force_login(alice)
    client.raise_request_exception = False
    response = client.get(reverse("review"))
    assert response.status_code == 500
    page = response.content.decode()
    assert not s.leaks(page, "the 500 page"), s.leaks(page, "the 500 page")
    assert "RuntimeError" not in page and "Traceback" not in page and "DATABASE_URL" not in page
    assert "Server error" in page  # the traceback is in the log, below
    logged = log_output.getvalue()
    assert "Internal Server Error: /review/" in logged and "RuntimeError: boom" in logged
    assert not s.leaks(logged, "the error log"), s.leaks(logged, "the error log")
    assert "[redacted]" in logged
