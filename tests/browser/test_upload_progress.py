"""(a) An operator logs in, uploads a batch and watches the progress bar
reach 100% while real worker processes do the work. htmx is really loaded
(served by the live server's static handler), the upload goes through htmx,
and ticket text full of markup stays text."""

import re

import pytest
from playwright.sync_api import expect

from ticketagent.models import Task, TaskStatus

from ..factories import csv_batch
from .conftest import assert_no_alerts, assert_same_page, login, mark_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SUBJECT = 'Refund <img src=x onerror="alert(\'subject\')">'
BODY = "I was charged twice. <script>alert('body')</script> <a href=\"javascript:alert('link')\">see</a>"


def test_upload_a_batch_and_watch_it_finish(page, live_server, workers, sandbox, alice):
    workers.start(2)
    login(page, "alice", "alice-pass-123")

    # htmx 2 is served from django-htmx's static files and runs
    assert page.evaluate("() => window.htmx && window.htmx.version").startswith("2.")
    assert page.request.get("/static/django_htmx/htmx-2.min.js").status == 200
    expect(page.locator("#tile-resumes")).to_be_visible()

    page.locator("#nav-upload").click()
    htmx_posts = []
    page.on("request", lambda r: r.method == "POST" and "/upload/" in r.url and htmx_posts.append(r.headers))

    # a rejected file: the errors come back in place (HTTP 400, swapped by htmx), nothing is created
    mark_page(page)
    bad = csv_batch(3).decode().replace("cust2@example.com", "cust2-at-example")
    page.locator("input[name=file]").set_input_files({"name": "bad.csv", "mimeType": "text/csv", "buffer": bad.encode()})
    page.get_by_role("button", name="Upload and start").click()
    expect(page.locator("#upload-form [role=alert]")).to_contain_text("nothing was created")
    expect(page.locator("#upload-form [role=alert]")).to_contain_text("customer_email")
    assert_same_page(page)
    assert Task.objects.count() == 0
    page.locator("input[name=file]").set_input_files(
        {"name": "batch.csv", "mimeType": "text/csv", "buffer": csv_batch(6, subject=SUBJECT, body=BODY)})
    page.locator("input[name=name]").fill("Browser batch")
    page.get_by_role("button", name="Upload and start").click()

    page.wait_for_url(re.compile(r"/tasks/\d+/$"))
    assert htmx_posts and htmx_posts[0].get("hx-request") == "true", "the upload went through htmx"
    task = Task.objects.get(name="Browser batch")
    assert task.items.count() == 6 and task.created_by == alice

    # the progress fragment polls every 2 s until the task is final (then 286 stops it)
    expect(page.locator("#percent")).to_have_text("100%", timeout=60_000)
    expect(page.locator("[role=progressbar]")).to_have_attribute("aria-valuenow", "100")
    expect(page.locator("#task-status")).to_have_text("completed")
    assert page.locator("#progress").get_attribute("hx-get") is None, "polling stopped"
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED
    assert sandbox.counts()["duplicates"] == 0

    # the markup in the tickets and in the drafts quoting them is shown as text
    expect(page.locator("table.items")).to_contain_text("onerror=")
    assert page.locator("img[src=x]").count() == 0
    page.locator("table.items a", has_text="T-1").first.click()
    expect(page.locator("#checkpoint pre, pre.json").first).to_contain_text("<script>alert('body')</script>")
    assert page.locator("a[href^='javascript:']").count() == 0

    # the tasks page shows the finished task
    page.goto("/")
    row = page.locator(f"#task-{task.pk}")
    expect(row).to_contain_text("completed")
    expect(row).to_contain_text("100%")
    expect(row).to_contain_text("items/min")
    assert_no_alerts(page)
    assert page.console_errors == []
