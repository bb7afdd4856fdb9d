"""The review queue in the browser.

(c) The helpdesk accepts a notification and drops the connection: the
    effect is unknown. One click on "Reconcile now" asks the helpdesk, which
    knows the key: committed, and the item finishes by itself.
(d) The same on the email channel, which has no look-up: an operator decides
    by hand, with a reason (a blank one is refused inline); the item
    finishes by itself, and the customer got exactly one email.

No recovery sweep runs here: the item continues because the decision's
transaction tells the ledger's listener, which enqueues it (the requeue
event carries the operator's name, not "recovery").
"""

import pytest
from playwright.sync_api import expect

from ledger.models import Effect, EffectState, EffectTransition
from ledger.services import effect_review
from ticketagent.models import Event, EventType, Item, ItemStatus, Task, TaskStatus
from ticketagent.services.upload import task_upload

from ..conftest import wait_for
from ..factories import csv_batch
from .conftest import assert_accessible, assert_no_alerts, assert_same_page, login, mark_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _unknown_effect(task) -> Effect:
    return wait_for(lambda: Effect.objects.filter(owner_task=str(task.pk), state=EffectState.UNKNOWN).first(),
                    timeout=30, message="an unknown effect")


def _item_waits(effect):
    return wait_for(lambda: task_item(effect).status == ItemStatus.WAITING_REVIEW, timeout=30,
                    message="the item to wait for review")


def task_item(effect) -> Item:
    return Item.objects.get(pk=int(effect.owner_item))


def test_an_unknown_effect_is_reconciled_with_one_click(page, live_server, workers, sandbox, alice):
    sandbox.set_faults(drop_next={"notify": 1})
    workers.start(1)
    login(page, "alice", "alice-pass-123")
    task = task_upload(data=csv_batch(3), filename="drop.csv", user=alice)
    effect = _unknown_effect(task)
    _item_waits(effect)
    assert sandbox.counts()["by_endpoint"]["notify"] >= 1, "the helpdesk took the notification before dropping"

    page.goto("/")
    expect(page.locator("#tile-unknown b")).to_have_text("1")
    page.get_by_role("link", name="Review").first.click()
    row = page.locator(f"#effect-{effect.pk}")
    expect(row).to_contain_text("notify_customer")
    expect(row).to_contain_text("helpdesk")
    expect(row).to_contain_text(effect.idempotency_key[:10])
    mark_page(page)

    row.get_by_role("button", name="Reconcile now").click()
    expect(row).to_have_attribute("data-state", "committed")
    expect(row).to_contain_text("reconcile")
    expect(row.locator(".last-reconcile")).not_to_have_text("—")
    assert_same_page(page)
    effect.refresh_from_db()
    assert effect.state == EffectState.COMMITTED and effect.resolved_by == "reconcile"

    page.goto(f"/tasks/{task.pk}/")
    expect(page.locator("#percent")).to_have_text("100%", timeout=30_000)
    expect(page.locator("#task-status")).to_have_text("completed")
    assert task_item(effect).status == ItemStatus.DONE
    counts = sandbox.counts()
    assert counts["by_endpoint"]["notify"] == 3 and counts["duplicates"] == 0, counts
    assert EffectTransition.objects.filter(event=EventType.EFFECT_RECONCILED, actor="alice").count() == 1
    assert_no_alerts(page)


def test_an_unknown_email_is_decided_by_hand_and_its_item_completes(page, live_server, workers, sandbox, alice):
    sandbox.set_faults(drop_next={"email": 1})
    workers.start(1)
    login(page, "alice", "alice-pass-123")

    page.locator("#nav-upload").click()
    page.locator("input[name=file]").set_input_files(
        {"name": "mail.csv", "mimeType": "text/csv", "buffer": csv_batch(2, prefix="M")})
    page.locator("input[name=name]").fill("Email batch")
    page.locator("select[name=notify_channel]").select_option("email")
    page.get_by_role("button", name="Upload and start").click()
    page.wait_for_url("**/tasks/*/")
    task = Task.objects.get(name="Email batch")
    assert task.notify_channel == "email"
    effect = _unknown_effect(task)
    assert effect.channel == "email" and effect.action == "notify_customer_email"
    _item_waits(effect)

    page.goto("/review/")
    row = page.locator(f"#effect-{effect.pk}")
    expect(row).to_contain_text("email has no look-up by key: decide by hand")
    expect(row.get_by_role("button", name="Reconcile now")).to_have_count(0)
    mark_page(page)

    # a blank reason is refused by the server, inline, and nothing changes
    row.get_by_label("verdict").select_option("happened")
    row.get_by_label("reason").fill("   ")
    row.get_by_role("button", name="Decide").click()
    expect(row.locator(".error")).to_contain_text("a reason is required")
    effect.refresh_from_db()
    assert effect.state == EffectState.UNKNOWN

    row.get_by_label("verdict").select_option("happened")
    row.get_by_label("reason").fill("The customer's mailbox shows the reply")
    row.get_by_role("button", name="Decide").click()
    expect(row).to_have_attribute("data-state", "committed")
    expect(row).to_contain_text("by alice: The customer's mailbox shows the reply")
    assert_same_page(page)

    page.goto(f"/tasks/{task.pk}/")
    expect(page.locator("#percent")).to_have_text("100%", timeout=30_000)
    expect(page.locator("#task-status")).to_have_text("completed")
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED
    item = task_item(effect)
    assert item.status == ItemStatus.DONE
    reviewed = EffectTransition.objects.get(event=EventType.REVIEWED, effect__owner_item=item.ref)
    assert reviewed.actor == "alice" and "mailbox" in reviewed.note
    assert Event.objects.filter(type=EventType.ITEM_REQUEUED, item=item, actor="alice").exists(), \
        "the decision itself let the item continue"
    counts = sandbox.counts()
    assert counts["by_endpoint"]["email"] == 2 and counts["duplicates"] == 0, counts
    assert_no_alerts(page)


def test_the_review_page_is_live_and_never_swaps_under_a_persons_hands(page, live_server, queue, sandbox,
                                                                      unknown_effect, alice):
    """Before: Review's rows and audit trail did not update: a Decide form stayed on an effect the sweep (or another
    operator) had already settled, until a reload."""
    settled_elsewhere, being_decided = unknown_effect(), unknown_effect()
    login(page, "alice", "alice-pass-123")
    page.set_viewport_size({"width": 390, "height": 900})  # on a phone
    page.goto("/review/")
    mark_page(page)
    expect(page.locator(f"#effect-{settled_elsewhere.pk}")).to_be_visible()

    effect_review(effect_id=settled_elsewhere.pk, verdict="happened", reason="seen in the helpdesk", actor="bob")
    expect(page.locator(f"#effect-{settled_elsewhere.pk}")).to_have_count(0, timeout=15_000)
    expect(page.locator(".audit")).to_contain_text("seen in the helpdesk")
    expect(page.locator("#unknown-h")).to_contain_text("(1)")

    # alice starts deciding the other one; meanwhile something else changes: her half-written reason stays
    row = page.locator(f"#effect-{being_decided.pk}")
    row.get_by_label("reason").fill("Checking the customer's mailbox")
    other = unknown_effect()
    page.wait_for_timeout(6_000)  # longer than the poll's period
    expect(page.locator(f"#effect-{other.pk}")).to_have_count(0)  # not swapped in under her hands
    expect(row.get_by_label("reason")).to_have_value("Checking the customer's mailbox")
    row.get_by_label("verdict").select_option("happened")
    row.get_by_role("button", name="Decide").click()
    expect(row).to_have_attribute("data-state", "committed")
    expect(page.locator(f"#effect-{other.pk}")).to_be_visible(timeout=15_000)  # the poll goes on once she is done
    assert_same_page(page)
    for width in (390, 1400):
        page.set_viewport_size({"width": width, "height": 900})
        assert_accessible(page, f"the live review page at {width} px")
    assert page.console_errors == []
