"""Pages an operator can trust mid-action, at phone and desktop width: one count per number, a rate that says its
window and leaves a model outage out, people's words for states, and only the steps that will run.

Before: the "approvals waiting" tile said 20 where "items by state" said 11 `waiting_approval` on the same page
(two counts taken at different moments), a rate read "915 items/min overall" for a task that took six minutes,
the ETA after a model outage was 5-9x too long, a rehearsal held 17 where its go live held 20, and the dry-run
listed steps the decision did not choose.
"""

import datetime as dt
from types import SimpleNamespace

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from ticketagent.llm.schemas import SCHEMA_VERSION
from ticketagent.models import ApiOutage, Checkpoint, Item, ItemStatus, Task, TaskStatus
from ticketagent.outages import MODEL_API
from ticketagent.plan import PLAN_VERSION, STEP_NAMES

from ..factories import make_task
from .conftest import assert_accessible, assert_fits_the_screen, assert_keyboard_reaches_every_action, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _decide(item, actions, held=None, cursor="save_draft"):
    Checkpoint.objects.create(
        item=item, task=item.task, plan_version=PLAN_VERSION, playbook_version_id=item.playbook_version_id,
        schema_version=SCHEMA_VERSION, cursor=STEP_NAMES.index(cursor), input_hash=item.input_hash(),
        step_outputs={"triage": {"category": "billing", "priority": "normal", "sentiment": "neutral",
                                 "language": "en", "summary": "a question"},
                      "draft": {"subject": "Re", "body": "An answer.", "articles": []},
                      "decide": {"actions": actions, "chosen": actions, "reason": "r", "rules": [], "checks": [],
                                 "held": held or {}}})


@pytest.mark.parametrize("width", [1280, 390])
def test_numbers_agree_say_their_window_and_states_read_as_words(page, live_server, queue, alice, width,
                                                                 monkeypatch):
    now = timezone.now()
    # the pages' clock held at `now`: the windows below are read against it, not against a loaded machine's delays
    monkeypatch.setattr("ticketagent.web.selectors.timezone", SimpleNamespace(now=lambda: now))
    # a running task: 40 items ended one every 3 s, then the model API was down 20 minutes, then 10 more ended
    running = make_task(100, name="After an outage")
    start = now - dt.timedelta(seconds=120 + 1200 + 30)
    rows = list(running.items.order_by("row"))
    for k, item in enumerate(rows[:50]):
        at = start + dt.timedelta(seconds=3 * (k + 1) + (1200 if k >= 40 else 0))
        item.status, item.finished_at = ItemStatus.DONE, at
    Item.objects.bulk_update(rows[:50], ["status", "finished_at"])
    ApiOutage.objects.create(what=MODEL_API, endpoint="http://model.test|m", started_at=start + dt.timedelta(
        seconds=121), ended_at=start + dt.timedelta(seconds=121 + 1200))
    Task.objects.filter(pk=running.pk).update(status=TaskStatus.RUNNING, started_at=start)
    # a suspended task: one item waits for approval of its reply, one will only save a draft
    suspended = make_task(2, name="Suspended", prefix="S")
    waiting, draft_only = suspended.items.order_by("row")
    check = "reply check: promise"
    _decide(waiting, ["save_draft", "notify_customer"], {"save_draft": check, "notify_customer": check})
    _decide(draft_only, ["save_draft"])
    Item.objects.filter(pk=waiting.pk).update(status=ItemStatus.WAITING_APPROVAL)
    Task.objects.filter(pk=suspended.pk).update(status=TaskStatus.SUSPENDED, status_reason="3 consecutive failures")
    # a rehearsal that closes a ticket, without automatic close: its go live holds the close
    rehearsal = make_task(1, name="Rehearsal", prefix="R", rehearsal=True)
    _decide(rehearsal.items.get(), ["save_draft", "close_ticket"])
    Item.objects.filter(task=rehearsal).update(status=ItemStatus.DONE, finished_at=now)
    Task.objects.filter(pk=rehearsal.pk).update(status=TaskStatus.COMPLETED, started_at=now, finished_at=now)

    login(page, "alice", "alice-pass-123")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/")
    # one count: the header, the tile and "items by state" say the same, in words, and when it was counted
    expect(page.locator("#att-approvals")).to_have_text("1 approval waiting")
    expect(page.locator("#tile-approvals b")).to_have_text("1")
    expect(page.locator("#tile-approvals span")).to_have_text("approval waiting")
    expect(page.locator("#tile-items")).to_contain_text("1 waiting for approval")
    expect(page.locator("#tile-items")).not_to_contain_text("waiting_approval")
    expect(page.locator("#att-as-of time")).to_have_count(1)
    expect(page.locator("#health .asof time")).to_have_count(1)
    # the rate counts the 30 s since the outage and the 2 min before it, not the 20 minutes down
    rate = page.locator(f"#task-{running.pk} .rate")
    expect(rate).to_contain_text("items/min over the last 2 min of running")
    expect(page.locator(f"#task-{running.pk} .eta")).not_to_have_text("ETA —")
    assert_accessible(page, "the task list")
    assert_fits_the_screen(page, "the task list")

    page.goto(f"/tasks/{running.pk}/")
    expect(page.locator("#progress .rate")).to_contain_text("over the last 2 min of running")
    assert_accessible(page, "a task after an outage")

    page.goto(f"/tasks/{suspended.pk}/")
    page.locator("#resume").click()
    dry = page.locator("#dry-run")
    expect(dry.locator("tr", has_text="S-1")).to_contain_text("save_draft, notify_customer")
    expect(dry.locator("tr", has_text="S-1")).to_contain_text("waiting for approval")
    expect(dry.locator("tr", has_text="S-2")).to_contain_text("save_draft")
    expect(dry.locator("tr", has_text="S-2")).not_to_contain_text("close_ticket")
    assert_accessible(page, "the dry-run")
    assert_fits_the_screen(page, "the dry-run")
    assert_keyboard_reaches_every_action(page, "the dry-run")

    page.goto(f"/tasks/{rehearsal.pk}/rehearsal/")
    expect(page.locator("#dist-held")).to_contain_text(
        "close_ticket — irreversible: closing waits for an operator's approval")
    assert_accessible(page, "the rehearsal report")
    assert_fits_the_screen(page, "the rehearsal report")
