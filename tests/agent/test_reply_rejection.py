"""Rejecting a held reply is a decision about the item, on real workers, the sandbox helpdesk and a scripted model.

"Reject, do the rest" runs what does not need the reply and nothing that does (`plan.after_rejection`): no reply,
no status that follows a reply (pending: waiting for the customer), and the rest as decided. "Reject, stop the
item" ends it there: skipped, with the reason, and nothing more reaches the helpdesk.

Before: a rejection skipped only the held actions and the item went on, so a rejected reply still set the
ticket to `pending` -- waiting for the customer's answer to a reply nobody sent.
"""

import pytest

from ledger.models import Effect
from ticketagent.models import Approval, Event, EventType, ItemStatus, TaskStatus
from ticketagent.playbooks.services import playbook_import, version_publish
from ticketagent.playbooks.standard import standard_spec
from ticketagent.services.items import item_approve

from ..factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)

URGENT_REPLIES = {"name": "Urgent replies need a person", "when": ["priority is urgent"], "approve": ["notify_customer"]}


def published():
    data = {**standard_spec().model_dump(mode="json"), "name": "Team rules", "rules": [URGENT_REPLIES]}
    return version_publish(version_id=playbook_import(data=data).pk)


def decision(*actions: str, status: str) -> dict:
    return {"actions": list(actions), "status": status, "reason": "the model's choice"}


REPLY_ACTIONS_AND_ESCALATE = ("save_draft", "notify_customer", "set_status", "escalate")
# a reply that fails the reply checks: both actions that carry it are held
ONLY_TRIAGE = {"subject": "Re: your message", "body": "Triage: "}


def held_item(workers, openai_server, *, status: str, reply: dict | None = None, **ticket):
    """One item run by a real worker up to its approval: the model decides the reply, a status and an escalation."""
    answers = {"Decision": decision(*REPLY_ACTIONS_AND_ESCALATE, status=status)}
    if reply is not None:
        answers["Reply"] = reply
    openai_server.configure(answers=answers)
    task = make_task(1, playbook_version=published(), **ticket)
    assert workers.burst(extra_env=openai_server.worker_env) == 0, workers.logs()
    item = task.items.get()
    assert item.status == ItemStatus.WAITING_APPROVAL, (item.last_error, workers.logs())
    return task, item


def outputs(item) -> dict:
    item.checkpoint.refresh_from_db()
    return item.checkpoint.step_outputs


def test_a_reply_held_by_its_checks_rejected_doing_the_rest_escalates_and_sets_no_status(
        workers, sandbox, openai_server):
    task, item = held_item(workers, openai_server, status="pending", reply=ONLY_TRIAGE)
    assert sandbox.counts()["deliveries"] == 0, "nothing before the reply: the draft itself is held"

    item_approve(item_id=item.pk, decision=Approval.REJECTED, reason="the draft is nonsense", actor="alice")
    assert workers.burst(extra_env=openai_server.worker_env) == 0, workers.logs()
    item.refresh_from_db()
    assert item.status == ItemStatus.DONE, item.last_error
    delivered = sandbox.counts()["by_endpoint"]
    assert not delivered.get("draft") and not delivered.get("notify"), "the rejected reply went nowhere"
    assert not delivered.get("status"), "no ticket waits for the customer's answer to a reply nobody sent"
    assert delivered.get("escalate") == 1, "the rest ran as decided"
    assert {e.owner_step for e in Effect.objects.filter(owner_item=item.ref)} == {"escalate"}
    done = outputs(item)
    assert done["notify_customer"] == {"skipped": "notify_customer rejected by alice"}
    assert done["set_status"]["skipped"].startswith("not run: status pending (waiting for the customer) follows a "
                                                    "reply, and the reply was rejected")
    [rejected] = Event.objects.filter(item=item, type=EventType.REJECTED)
    assert rejected.actor == "alice" and rejected.payload["decision"] == Approval.REJECTED
    assert rejected.payload["actions"] == ["save_draft", "notify_customer"]
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED


@pytest.mark.parametrize(("status", "status_deliveries"), [("pending", 0), ("escalated", 1)])
def test_a_reply_held_by_a_rule_rejected_doing_the_rest_keeps_what_ran_before_and_what_needs_no_reply(
        workers, sandbox, openai_server, status, status_deliveries):
    """The rule holds the reply only: the draft (a private comment) was saved before it; after the rejection a
    status that follows a reply does not run, one that does not (escalated) does."""
    task, item = held_item(workers, openai_server, status=status, priority="urgent")
    assert {k: n for k, n in sandbox.counts()["by_endpoint"].items() if n} == {"draft": 1}

    item_approve(item_id=item.pk, decision=Approval.REJECTED, reason="I will call them", actor="alice")
    assert workers.burst(extra_env=openai_server.worker_env) == 0, workers.logs()
    item.refresh_from_db()
    assert item.status == ItemStatus.DONE, item.last_error
    delivered = sandbox.counts()["by_endpoint"]
    assert delivered.get("draft") == 1 and not delivered.get("notify")
    assert delivered.get("status", 0) == status_deliveries
    assert delivered.get("escalate") == 1
    assert sandbox.counts()["duplicates"] == 0


def test_a_rejected_reply_that_stops_the_item_sends_nothing_more(workers, sandbox, openai_server):
    task, item = held_item(workers, openai_server, status="pending", priority="urgent")
    before = sandbox.counts()["deliveries"]
    assert before == 1  # the draft, saved before the reply was held

    item_approve(item_id=item.pk, decision=Approval.STOPPED, reason="wrong customer, handled by phone",
                 actor="alice")
    item.refresh_from_db()
    assert item.status == ItemStatus.SKIPPED
    assert item.last_error == "stopped: notify_customer rejected by alice: wrong customer, handled by phone"
    assert (item.approval, item.approval_by, item.approval_at is not None) == (Approval.STOPPED, "alice", True)
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, "a stopped item has ended: nothing of the task waits"

    assert workers.burst(extra_env=openai_server.worker_env) == 0, workers.logs()  # nothing left to run
    assert sandbox.counts()["deliveries"] == before, "nothing more reached the helpdesk"
    assert Effect.objects.filter(owner_item=item.ref).count() == 1
    [rejected] = Event.objects.filter(item=item, type=EventType.REJECTED)
    assert rejected.payload["decision"] == Approval.STOPPED and rejected.payload["status"] == ItemStatus.SKIPPED
    assert not Event.objects.filter(item=item, type=EventType.ITEM_REQUEUED).exists()
