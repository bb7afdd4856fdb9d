"""(e) A viewer sees everything and no action button; a forged POST (with a
valid CSRF token, from the viewer's own session) is refused with 403 and
changes nothing. Through htmx, the refusal is shown inline."""

import pytest
from playwright.sync_api import expect

from ledger.models import Effect, EffectState
from ticketagent.models import Event, ItemStatus, Task, TaskStatus

from ..factories import csv_batch, make_task
from .conftest import assert_no_alerts, assert_same_page, csrf_token, login, mark_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ACTION_BUTTONS = ["Resume…", "Pause", "Cancel", "Reconcile now", "Decide", "Approve", "Reject",
                  "Confirm resume", "Upload and start", "Retry", "Skip"]


@pytest.fixture
def suspended_task_with_an_unknown_effect(unknown_effect):
    task = make_task(3, name="Suspended batch")
    effect = unknown_effect(task)  # the first item waits for review
    waiting = task.items.order_by("row")[1]
    task.items.filter(pk=waiting.pk).update(status=ItemStatus.WAITING_APPROVAL)
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.SUSPENDED, status_reason="3 consecutive failures: x")
    return task, effect, waiting


def _assert_no_buttons(page):
    for name in ACTION_BUTTONS:
        expect(page.get_by_role("button", name=name)).to_have_count(0)
        # (exact for the short names: "Skip to content" is a link every page has)
        expect(page.get_by_role("link", name=name, exact=name in ("Skip", "Retry"))).to_have_count(0)


def test_a_viewer_sees_no_buttons_and_a_forged_post_gets_403(page, live_server, bob,
                                                               suspended_task_with_an_unknown_effect):
    task, effect, waiting = suspended_task_with_an_unknown_effect
    login(page, "bob", "bob-pass-123")
    expect(page.locator(".who")).to_contain_text("bob (viewer)")
    expect(page.locator("#nav-upload")).to_have_count(0)
    expect(page.locator(f"#task-{task.pk}")).to_contain_text("3 consecutive failures")

    for url in ("/", f"/tasks/{task.pk}/", "/review/", f"/items/{waiting.pk}/", "/upload/", "/workers/",
                "/search/?q=T-1"):
        page.goto(url)
        _assert_no_buttons(page)
    page.goto("/review/")
    expect(page.locator(f"#effect-{effect.pk}")).to_contain_text("notify_customer")  # looking is allowed
    expect(page.locator(f"#approval-{waiting.pk}")).to_be_visible()

    # forged requests from the viewer's own session, with a valid CSRF token
    page.goto(f"/tasks/{task.pk}/")
    token = csrf_token(page)
    events = Event.objects.count()
    targets = [
        (f"/tasks/{task.pk}/resume/", {}),
        (f"/tasks/{task.pk}/pause/", {}),
        (f"/tasks/{task.pk}/cancel/", {}),
        (f"/effects/{effect.pk}/reconcile/", {}),
        (f"/effects/{effect.pk}/review/", {"verdict": "happened", "reason": "forged"}),
        (f"/items/{waiting.pk}/retry/", {}),
        (f"/items/{waiting.pk}/skip/", {"reason": "forged"}),
        (f"/items/{waiting.pk}/approval/", {"approval": "approve", "reason": "forged"}),
    ]
    for url, form in targets:
        status, body = page.evaluate(
            """async ([url, token, form]) => {
                const response = await fetch(url, {method: "POST", headers: {"X-CSRFToken": token},
                                                   body: new URLSearchParams(form)});
                return [response.status, await response.text()];
            }""", [url, token, form])
        # refused for the role, not the token, with a page that says so
        assert status == 403 and 'id="denied"' in body and "csrf-denied" not in body, (url, body[:200])
        response = page.request.post(url, form=form, headers={"X-CSRFToken": token})
        assert response.status == 403 and "csrf-denied" not in response.text(), url
    upload = page.request.post("/upload/", headers={"X-CSRFToken": token}, multipart={
        "file": {"name": "b.csv", "mimeType": "text/csv", "buffer": csv_batch(1)}, "notify_channel": "helpdesk"})
    assert upload.status == 403 and "csrf-denied" not in upload.text()

    # through htmx the refusal is shown in the page, which stays
    mark_page(page)
    page.evaluate("(url) => htmx.ajax('POST', url, {target: '#controls', swap: 'outerHTML'})",
                  f"/tasks/{task.pk}/cancel/")
    expect(page.locator("#flash")).to_contain_text("Not allowed (403)")
    assert_same_page(page)

    task.refresh_from_db()
    effect.refresh_from_db()
    waiting.refresh_from_db()
    assert task.status == TaskStatus.SUSPENDED and task.resume_count == 0
    assert effect.state == EffectState.UNKNOWN and Effect.objects.count() == 1
    assert waiting.status == ItemStatus.WAITING_APPROVAL and waiting.approval == ""
    assert Task.objects.count() == 1 and Event.objects.count() == events
    assert_no_alerts(page)
