"""An operator's day, in the browser, with real workers: upload, watch, a suspended
task, its dry-run, the resume, an unknown email decided from its evidence, a close
approved. With DOCS_SCREENSHOTS=1 it saves the pictures of docs/operator-guide.md,
so the guide shows what the product does today."""

import csv
import io

import pytest
from playwright.sync_api import expect

from ledger.models import Effect, EffectState
from ticketagent.models import Task, TaskStatus

from ..conftest import wait_for
from .conftest import assert_no_alerts, docs_screenshot, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TICKETS = [
    ("D-1", "hannah@example.com", "Refund not showing on my card", "You confirmed the refund but it is not there."),
    ("D-2", "marcus@example.org", "Password reset link expired", "Every reset link says it has expired."),
    ("D-3", "tom@example.com", "All sorted, thanks", "It works now. You can close this ticket."),
]


def _batch(rows) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["ticket_id", "customer_email", "subject", "body"])
    writer.writerows(rows)
    return out.getvalue().encode()


def _upload(page, name: str, data: bytes, *, email: bool = False, shot: str = "") -> Task:
    page.locator("#nav-upload").click()
    page.locator("input[name=file]").set_input_files({"name": f"{name}.csv", "mimeType": "text/csv", "buffer": data})
    page.locator("input[name=name]").fill(name)
    if email:
        page.locator("select[name=notify_channel]").select_option("email")
    if shot:
        docs_screenshot(page.locator("main"), shot)
    page.get_by_role("button", name="Upload and start").click()
    page.wait_for_url("**/tasks/*/")
    return Task.objects.get(name=name)


def test_an_operators_day(page, live_server, workers, sandbox, alice):
    workers.start(2)
    workers.start_recovery()
    login(page, "alice", "alice-pass-123")

    # morning: a batch whose first email is lost on the way (the mail server drops the connection)
    sandbox.set_faults(drop_next={"email": 1})
    morning = _upload(page, "Morning batch", _batch(TICKETS), email=True, shot="upload")
    expect(page.locator("#task-status")).to_have_text("needs review", timeout=60_000)
    docs_screenshot(page.locator("#task-head"), "watch")

    # the helpdesk refuses drafts: three failures in a row suspend the next batch
    sandbox.set_faults(error_status=422, error_rate={"draft": 1.0})
    rows = [(f"S-{i}", f"s{i}@example.com", "Where is my parcel?", "Tracking says nothing.") for i in range(1, 7)]
    afternoon = _upload(page, "Afternoon batch", _batch(rows))
    expect(page.locator("#task-status")).to_have_text("suspended", timeout=60_000)
    expect(page.locator("#status-reason")).to_contain_text("3 consecutive failures")
    expect(page.locator("#att-suspended b")).to_have_text("1", timeout=15_000)
    docs_screenshot(page.locator("#task-head"), "suspended")

    # the helpdesk is fixed; the dry-run first, then the resume
    sandbox.clear_faults()
    page.locator("#resume").click()
    expect(page.locator("#confirm-resume")).to_be_visible()
    docs_screenshot(page.locator("#controls"), "dry-run")
    page.locator("#confirm-resume").click()
    expect(page.locator("#controls [role=status]")).to_contain_text("Resumed:")
    docs_screenshot(page.locator("#task-head"), "resumed")
    expect(page.locator("#task-status")).to_have_text("completed", timeout=60_000)
    expect(page.locator("#resume-count")).to_have_text("resumed 1×")

    # the unknown email: decided from its evidence, from the header in two clicks
    effect = wait_for(lambda: Effect.objects.filter(owner_task=str(morning.pk), state=EffectState.UNKNOWN).first(),
                      message="the unknown email")
    page.locator("#att-unknown").click()
    row = page.locator(f"#effect-{effect.pk}")
    expect(row.locator(".evidence")).to_contain_text("no answer came back")
    docs_screenshot(row, "review-unknown")
    row.get_by_label("verdict").select_option("happened")
    row.get_by_label("reason").fill("The mail server's log shows the message was accepted")
    row.get_by_role("button", name="Decide").click()
    expect(row).to_have_attribute("data-state", "committed")

    # the close the customer asked for: approved
    approval = page.locator("#approvals tbody tr").first
    expect(approval).to_contain_text("D-3", timeout=30_000)
    docs_screenshot(page.locator("#approvals"), "approval")
    approval.get_by_label("reason").fill("The customer asked to close it")
    approval.get_by_role("button", name="Approve").click()
    expect(approval).to_contain_text("approved by alice")

    page.goto(f"/tasks/{morning.pk}/")
    expect(page.locator("#task-status")).to_have_text("completed", timeout=60_000)
    expect(page.locator("#attention")).to_contain_text("0 unknown effects")
    for task in (morning, afternoon):
        task.refresh_from_db()
        assert task.status == TaskStatus.COMPLETED
    counts = sandbox.counts()
    assert counts["duplicates"] == 0 and counts["by_endpoint"]["email"] == 3, counts
    assert_no_alerts(page)
    assert page.console_errors == []
