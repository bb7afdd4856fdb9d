"""Steps the decision did not choose are shown as skipped, never as done.

Before: STEP_DONE was logged for `escalate` and `close_ticket` when the
decision did not choose them, and an item waiting for close approval showed
step "escalate (6/8)". The event log still replays to the same checkpoints."""

import pytest
from playwright.sync_api import expect

from tests.factories import task_replay_diff
from ticketagent.models import Event, EventType
from ticketagent.pipeline.run import item_process

from ..factories import make_task
from .conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_an_item_waiting_for_close_approval_is_at_close_ticket_and_escalate_was_skipped(page, live_server, queue,
                                                                                         sandbox, alice):
    task = make_task(1, name="Close requests", subject="All good", body="Thanks, you can close this ticket now.")
    first = task.items.get()
    assert item_process(item_id=first.pk, attempt=first.attempt) == "waiting at close_ticket"
    login(page, "alice", "alice-pass-123")
    page.goto(f"/tasks/{task.pk}/")
    step = page.locator(f"#item-{first.pk} .step")
    expect(step).to_contain_text("close_ticket (7/8)")
    expect(page.locator("#timeline")).to_contain_text("step skipped: not chosen by the decision T-1 · escalate")
    assert not Event.objects.filter(item=first, type=EventType.STEP_DONE, payload__step="escalate").exists()
    assert task_replay_diff(task.pk) == []

    # approved: the close runs and the item is done; nothing not chosen was ever "done"
    page.goto("/review/#approvals")
    row = page.locator(f"#approval-{first.pk}")
    row.get_by_label("reason").fill("The customer asked to close it")
    row.get_by_role("button", name="Approve").click()
    expect(row).to_contain_text("approved by alice")
    first.refresh_from_db()
    assert item_process(item_id=first.pk, attempt=first.attempt) == "done"
    assert task_replay_diff(task.pk) == []
    done_steps = set(Event.objects.filter(item=first, type=EventType.STEP_DONE).values_list("payload__step", flat=True))
    skipped = set(Event.objects.filter(item=first, type=EventType.STEP_SKIPPED).values_list("payload__step", flat=True))
    assert "escalate" not in done_steps and skipped == {"escalate"}
    assert "close_ticket" in done_steps
    page.goto(f"/items/{first.pk}/")
    expect(page.locator("#history li[data-type=STEP_SKIPPED]")).to_have_count(1)
