"""A newer playbook version, met on a paused task's dry-run: the task stays on its version until an operator moves
the unfinished items that have not acted yet, from the dry-run, by keyboard and at phone width."""

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from ledger.models import Effect, EffectState
from ticketagent.models import ItemStatus, Task, TaskStatus
from ticketagent.playbooks.services import draft_open, draft_update, playbook_import, version_publish
from ticketagent.playbooks.standard import standard_spec

from ..factories import make_task
from .conftest import assert_accessible, assert_fits_the_screen, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("width", [1200, 390])
def test_the_dry_run_offers_the_newer_version_and_moves_the_items_without_effects(page, live_server, queue,
                                                                                  alice, width):
    spec = standard_spec().model_dump(mode="json")
    v1 = version_publish(version_id=playbook_import(data={**spec, "name": "Team"}).pk)
    task = make_task(3, name="On v1", playbook_version=v1)
    acted = task.items.order_by("row").first()
    Effect.objects.create(idempotency_key="k" * 64, action="save_draft", effect_class="overwrite", channel="helpdesk",
                          state=EffectState.COMMITTED, owner_task=str(task.pk), owner_item=acted.ref,
                          owner_step="save_draft", claim_token="t", payload={}, payload_hash="h" * 64,
                          intent_at=timezone.now())
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.PAUSED, status_reason="paused by alice")
    draft = draft_open(playbook_id=v1.playbook_id)
    v2 = version_publish(version_id=draft_update(
        version_id=draft.pk, changes={"reply": {**spec["reply"], "signature": "— v2"}}).pk)

    login(page, "alice", "alice-pass-123")
    page.set_viewport_size({"width": width, "height": 800})
    page.goto(f"/tasks/{task.pk}/")
    expect(page.locator("#task-playbook")).to_have_text("Team v1")
    page.locator("#resume").focus()
    page.keyboard.press("Enter")
    note = page.locator("#newer-version")
    expect(note).to_contain_text("Team v2 is published; this task runs on Team v1.")
    expect(note).to_contain_text("2 unfinished items with no effect sent may move to it")
    assert_fits_the_screen(page, "dry-run with a newer version")
    assert_accessible(page, "dry-run with a newer version")
    move = page.locator("#move-version")
    expect(move).to_have_text("Move 2 items to Team v2")
    move.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#controls [role=status]")).to_contain_text("Moved 2 items to the newer version")

    task.refresh_from_db()
    assert task.playbook_version_id == v1.pk, "the task still says what it started on"
    on = dict(task.items.values_list("ticket_id", "playbook_version_id"))
    assert on[acted.ticket_id] == v1.pk and sorted(on.values()) == sorted([v1.pk, v2.pk, v2.pk])
    assert set(task.items.values_list("status", flat=True)) == {ItemStatus.QUEUED}
