"""Every page is readable, and every action usable, without JavaScript:
plain links and forms, the server answering with whole pages."""

import re

import pytest
from playwright.sync_api import expect

from ledger.models import EffectState
from ticketagent.models import Event, EventType, Task, TaskStatus

from ..factories import make_task
from .conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("page", [{"javascript": False}], indirect=True)
def test_an_operator_without_javascript_resumes_and_decides(page, live_server, queue, alice, unknown_effect):
    effect = unknown_effect(make_task(1, name="Unknown batch"))
    task = make_task(2, name="Paused batch")
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.PAUSED, status_reason="paused by alice")

    login(page, "alice", "alice-pass-123")
    expect(page.locator(f"#task-{task.pk}")).to_contain_text("paused")
    expect(page.locator("#tile-unknown b")).to_have_text("1")

    # Resume… is a link to the dry-run page; Confirm is a form
    page.goto(f"/tasks/{task.pk}/")
    page.locator("#resume").click()
    page.wait_for_url(re.compile(rf"/tasks/{task.pk}/dry-run/#dry-run$"))
    expect(page.locator("#dry-run")).to_contain_text("recompute 2")
    page.locator("#confirm-resume").click()
    page.wait_for_url(f"**/tasks/{task.pk}/#controls")  # to the controls: the new status and what comes next
    expect(page.locator("#task-status")).to_have_text("running")
    assert Event.objects.filter(task=task, type=EventType.RESUMED, actor="alice").exists()

    # a decision on the review page is a form post; a blank reason comes back as an error page
    page.goto("/review/")
    row = page.locator(f"#effect-{effect.pk}")
    row.get_by_label("verdict").select_option("skip")
    row.get_by_label("reason").fill(" ")
    row.get_by_role("button", name="Decide").click()
    expect(page.locator("#page-error")).to_contain_text("a reason is required")
    row = page.locator(f"#effect-{effect.pk}")
    row.get_by_label("verdict").select_option("skip")
    row.get_by_label("reason").fill("The customer closed the ticket themselves")
    row.get_by_role("button", name="Decide").click()
    page.wait_for_url("**/review/")
    expect(page.locator(f"#effect-{effect.pk}")).to_have_count(0)
    expect(page.locator(".events")).to_contain_text("The customer closed the ticket themselves")
    effect.refresh_from_db()
    assert effect.state == EffectState.SKIPPED and effect.reviewed_by == "alice"


@pytest.mark.parametrize("page", [{"javascript": False}], indirect=True)
def test_without_javascript_a_failed_item_is_skipped_and_search_and_workers_answer(page, live_server, operator_world, alice):
    world = operator_world
    login(page, "alice", "alice-pass-123")
    page.locator("#att-failed").click()
    row = page.locator(f"#failed-{world['failed'].pk}")
    row.get_by_label("reason to skip").fill("Duplicate of another ticket")
    row.get_by_role("button", name="Skip").click()
    page.wait_for_url("**/review/")
    expect(page.locator(f"#failed-{world['failed'].pk}")).to_have_count(0)
    expect(page.locator(".audit")).to_contain_text("item skipped by alice — “Duplicate of another ticket”")
    expect(page.locator("#att-failed b")).to_have_text("0")
    page.goto("/search/?q=T-2")
    expect(page.locator("table.results tbody tr")).to_have_count(1)
    page.goto("/workers/")
    expect(page.locator("#queue-h")).to_have_text("The queue")
