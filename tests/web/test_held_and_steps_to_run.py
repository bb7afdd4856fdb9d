"""A rehearsal's "Held for approval" is what its go live will hold, and a dry-run lists the steps each item will run.

Before: a rehearsal counted only what its rules and reply checks held (17), while going live also holds every
irreversible close of a task without automatic close (20); it counted a rule's hold of an action the decision
did not choose, which holds nothing. The dry-run listed every step after an item's cursor ("continue: save_draft,
notify_customer, set_status, escalate, close_ticket" for an item that will only save a draft), and "close_ticket"
for every item waiting for approval, whatever it held.
"""

import pytest

from ticketagent.llm.schemas import SCHEMA_VERSION
from ticketagent.models import Checkpoint, Item, ItemStatus, Task, TaskStatus
from ticketagent.plan import PLAN_VERSION, STEP_NAMES
from ticketagent.services.items import item_held_actions
from ticketagent.services.resume import task_dry_run
from ticketagent.web.selectors.rehearsal import rehearsal_page, rehearsal_summary

from ..factories import make_task

pytestmark = pytest.mark.django_db

CHECK = "reply check: promise"
DECISIONS = {
    # a close: held because the task allows no automatic close
    "close": {"actions": ["save_draft", "close_ticket"], "held": {}},
    # a reply check held the reply's carriers
    "reply": {"actions": ["save_draft", "notify_customer"], "held": {"save_draft": CHECK, "notify_customer": CHECK}},
    # a rule held an action the decision did not choose: nothing waits
    "unchosen": {"actions": ["save_draft"], "held": {"escalate": "rule: VIP"}},
}


def _decided(task, status=None, cursor="save_draft") -> dict[str, Item]:
    out = {}
    for item, (name, decide) in zip(task.items.order_by("row"), DECISIONS.items(), strict=True):
        Checkpoint.objects.create(
            item=item, task=task, plan_version=PLAN_VERSION, playbook_version_id=item.playbook_version_id,
            schema_version=SCHEMA_VERSION, cursor=STEP_NAMES.index(cursor), input_hash=item.input_hash(),
            step_outputs={"triage": {"category": "billing", "priority": "normal", "sentiment": "neutral",
                                     "language": "en", "summary": "s"},
                          "draft": {"subject": "Re", "body": "b", "articles": []},
                          "decide": {**decide, "chosen": decide["actions"], "reason": "r", "rules": [],
                                     "checks": []}})
        if status:
            Item.objects.filter(pk=item.pk).update(status=status)
        out[name] = item
    return out


def test_a_rehearsal_holds_what_its_go_live_will_hold_closes_included():
    rehearsal = make_task(3, name="Rehearsal", rehearsal=True, allow_auto_close=False)
    items = _decided(rehearsal, ItemStatus.DONE, cursor="save_draft")
    Task.objects.filter(pk=rehearsal.pk).update(status=TaskStatus.COMPLETED)
    rehearsal.refresh_from_db()
    held = {share.name: share.n for key, _, _, shares in rehearsal_summary(rehearsal).distributions
            if key == "held" for share in shares}
    assert held == {"close_ticket — irreversible: closing waits for an operator's approval": 1,
                    f"save_draft — {CHECK}": 1, f"notify_customer — {CHECK}": 1}
    # ticket by ticket, what the report shows held is what an approval of that item covers
    _, rows = rehearsal_page(rehearsal, 1)
    for row in rows:
        assert [action for action, _ in row.held] == sorted(item_held_actions(row.item, rehearsal)), row.item.ticket_id
    assert [a for a, _ in next(r for r in rows if r.item == items["unchosen"]).held] == []


def test_with_automatic_close_a_close_is_not_held():
    rehearsal = make_task(3, name="Rehearsal, auto close", rehearsal=True, allow_auto_close=True)
    _decided(rehearsal, ItemStatus.DONE)
    held = {share.name for key, _, _, shares in rehearsal_summary(rehearsal).distributions if key == "held"
            for share in shares}
    assert held == {f"save_draft — {CHECK}", f"notify_customer — {CHECK}"}


def test_the_dry_run_lists_only_the_steps_each_item_will_run():
    task = make_task(3, name="Suspended")
    items = _decided(task)  # queued, decided, at save_draft
    Item.objects.filter(pk=items["reply"].pk).update(status=ItemStatus.WAITING_APPROVAL)
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.SUSPENDED)
    plan = {entry.item_id: entry for entry in task_dry_run(task_id=task.pk).items}
    assert (plan[items["close"].pk].category, plan[items["close"].pk].steps) == (
        "continue", ["save_draft", "close_ticket"])
    assert plan[items["unchosen"].pk].steps == ["save_draft"]
    waiting = plan[items["reply"].pk]
    assert (waiting.category, waiting.steps) == ("needs_confirmation", ["save_draft", "notify_customer"])
