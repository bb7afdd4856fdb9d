"""Ticket text and model text are untrusted: every page renders them inert.

The payloads reach the pages the way they would in production: through an
upload (ticket text), a checkpoint's step outputs (model text), the gate's
payload summary (an effect built from model text), an item's last error and
a task's status reason (errors quoting either), and event payloads.
"""

import json
from html.parser import HTMLParser

import pytest
from django.urls import reverse

from ticketagent.eventlog.append import event_append
from ticketagent.llm.schemas import SCHEMA_VERSION
from ticketagent.models import Checkpoint, EventType, Item, Task, TaskStatus
from ticketagent.plan import PLAN_VERSION
from ticketagent.services.upload import task_upload

from .conftest import HTMX

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

SCRIPT = "<script>alert('xss-script')</script>"
IMG = '<img src=x onerror="alert(\'xss-img\')">'
LINK = '<a href="javascript:alert(\'xss-link\')">click me</a>'
EVIL = f"{SCRIPT} {IMG} {LINK}"



class LiveMarkup(HTMLParser):
    """Collects what a browser would execute: script elements, on* handler
    attributes and javascript: URLs."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}={value!r}>")
            if name in ("href", "src", "action", "formaction", "hx-get", "hx-post") and value and \
                    value.strip().lower().startswith("javascript:"):
                self.found.append(f"<{tag} {name}={value!r}>")
        if tag == "script":
            src = dict(attrs).get("src") or ""
            if not src.startswith("/static/"):
                self.found.append(f"<script {attrs!r}>")


def evil_batch() -> bytes:
    rows = [{"ticket_id": "XSS-1", "customer_email": "ann@example.com", "customer_name": f"Ann {SCRIPT}",
             "subject": f"Refund {IMG}", "body": f"Please refund. {EVIL}", "priority": "normal"}]
    return "\n".join(json.dumps(r) for r in rows).encode()


@pytest.fixture
def evil_task(unknown_effect):
    task = task_upload(data=evil_batch(), filename=f"evil{SCRIPT}.jsonl", name=f"Batch {IMG}")
    item = task.items.get()
    Checkpoint.objects.create(item=item, task=task, plan_version=PLAN_VERSION, schema_version=SCHEMA_VERSION,
                              playbook_version_id=item.playbook_version_id,
                              cursor=3, input_hash=item.input_hash(), step_outputs={
                                  "triage": {"category": "billing", "summary": EVIL},
                                  "draft": {"subject": f"Re: {IMG}", "body": EVIL},
                                  "decide": {"actions": ["notify_customer"], "status": "pending", "reason": LINK},
                              })
    unknown_effect(task, body=EVIL)  # the gate summarises the model's draft into payload_summary
    Item.objects.filter(pk=item.pk).update(last_error=f"notify_customer: {EVIL}")
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.SUSPENDED, status_reason=f"3 failures: {EVIL}")
    event_append(task_id=task.pk, item_id=item.pk, type=EventType.ITEM_FAILED, payload={"reason": EVIL, "note": IMG,
                                                                                          "step": SCRIPT})
    return task


def assert_inert(html: str, where: str):
    parser = LiveMarkup()
    parser.feed(html)
    assert parser.found == [], f"{where}: live markup {parser.found}"
    assert "<script>alert" not in html, where


def test_every_page_renders_untrusted_text_escaped(client, alice, evil_task):
    client.force_login(alice)
    item = evil_task.items.get()
    pages = {
        "tasks": reverse("tasks"),
        "tasks fragment": reverse("tasks"),
        "task detail": reverse("task-detail", args=[evil_task.pk]),
        "progress fragment": reverse("task-progress", args=[evil_task.pk]) + "?shown=running",
        "dry-run page": reverse("task-dry-run", args=[evil_task.pk]),
        "item": reverse("item-detail", args=[item.pk]),
        "review": reverse("review"),
    }
    seen_escaped = 0
    for where, url in pages.items():
        headers = HTMX if "fragment" in where else {}
        response = client.get(url, headers=headers)
        assert response.status_code in (200, 286), where  # 286: a fragment whose polling ends
        html = response.content.decode()
        assert_inert(html, where)
        seen_escaped += "&lt;script&gt;alert(" in html or "&lt;img src=x onerror=" in html
    assert seen_escaped == len(pages), "the payloads should be shown (escaped), not dropped"

    # the item page shows the model's text (checkpoint) and the ticket, escaped
    html = client.get(reverse("item-detail", args=[item.pk])).content.decode()
    assert "&lt;a href=&quot;javascript:alert(" in html or "&lt;a href=\\&quot;javascript:" in html
    # the review row shows the payload summary built from the model's draft, escaped
    assert "&lt;script&gt;" in client.get(reverse("review")).content.decode()


def test_htmx_fragments_after_actions_are_escaped_too(client, alice, evil_task):
    client.force_login(alice)
    from ledger.models import Effect

    effect = Effect.objects.get()
    row = client.post(reverse("effect-review", args=[effect.pk]), {"verdict": "skip", "reason": EVIL},
                      headers=HTMX)
    assert row.status_code == 200
    assert_inert(row.content.decode(), "decided row")
    assert "&lt;script&gt;alert(" in row.content.decode()

    actions = client.post(reverse("task-cancel", args=[evil_task.pk]), headers=HTMX)
    assert_inert(actions.content.decode(), "actions")
    dry_run = client.get(reverse("task-dry-run", args=[evil_task.pk]), headers=HTMX)
    assert_inert(dry_run.content.decode(), "dry-run fragment")


def test_the_upload_error_list_escapes_the_file_content(client, alice):
    client.force_login(alice)
    from django.core.files.uploadedfile import SimpleUploadedFile

    bad = json.dumps({"ticket_id": SCRIPT, "customer_email": IMG, "subject": LINK, "body": ""}).encode()
    response = client.post(reverse("upload"), {"file": SimpleUploadedFile("x.jsonl", bad), "notify_channel": "helpdesk"},
                           headers=HTMX)
    assert response.status_code == 400
    assert_inert(response.content.decode(), "upload errors")


def test_the_jsonl_export_is_a_download_not_a_page(client, alice, evil_task):
    client.force_login(alice)
    response = client.get(reverse("task-events", args=[evil_task.pk]))
    assert response["Content-Type"].startswith("application/x-ndjson")
    assert response["Content-Disposition"].startswith("attachment;")
    assert response["X-Content-Type-Options"] == "nosniff"


def test_the_checker_itself_sees_live_markup():
    """A canary: unescaped, the payloads are caught, so a pass above means something."""
    parser = LiveMarkup()
    parser.feed(f"<p>{EVIL}</p>")
    assert len(parser.found) == 3
