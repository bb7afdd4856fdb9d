"""The kill test's RT oracle finds what it must: a key on two replies, a reply without a key, a committed effect
that is not in RT, a write in RT the ledger does not have, a ticket change that landed for a row that is not
committed."""

import uuid

import pytest
from django.utils import timezone

from ledger.models import Effect, EffectState
from ops.killtest.report import Report
from ops.killtest.rt import RTOracle
from ops.rt_server import CF_NAME
from ticketagent.channels.rt import key_marker
from ticketagent.channels.rt_lookup import change_marker
from ticketagent.services.tasks import task_create
from ticketagent.upload.rows import TicketRow

pytestmark = pytest.mark.django_db


def reply(rt, ticket, key=None):
    body = {"Content": "<p>Hello</p>" + (key_marker(key) if key else ""), "ContentType": "text/html"}
    if key:
        body["TxnCustomFields"] = {CF_NAME: key}
    assert rt.post(f"/ticket/{ticket}/correspond", body).status == 201


def effect(task, ticket, key, state=EffectState.COMMITTED):
    return Effect.objects.create(idempotency_key=key, action="notify_customer", effect_class="once",
                                 channel="helpdesk", state=state, owner_task=str(task.pk), owner_item=f"i-{ticket}",
                                 owner_step="notify_customer", payload={"ticket": str(ticket)},
                                 intent_at=timezone.now(), slot=f"{task.pk}/i-{ticket}/notify_customer")


def test_the_rt_oracle_reports_doubles_strays_and_losses(rt_server):
    rt = rt_server
    tickets = [rt.create_ticket(f"Oracle {i}") for i in range(4)]
    task = task_create(rows=[TicketRow(row=i + 2, ticket_id=str(t), customer_email="x@example.com", subject="s",
                                       body="b") for i, t in enumerate(tickets)], name="oracle")
    doubled, lost, stray = (uuid.uuid4().hex * 2 for _ in range(3))
    effect(task, tickets[0], doubled)
    reply(rt, tickets[0], doubled)
    reply(rt, tickets[0], doubled)
    effect(task, tickets[1], lost)  # committed, never written
    reply(rt, tickets[2], stray)  # written, no ledger row
    reply(rt, tickets[3])  # a reply nobody can account for
    report = Report()
    RTOracle(rt).check_round(task, report)
    assert report.duplicates == 1
    text = "\n".join(report.problems)
    assert f"notify_customer for item i-{tickets[0]} is in RT 2 times (2 replies)" in text
    assert f"notify_customer item i-{tickets[1]} committed but not in RT" in text
    assert f"a write in RT with key {stray[:12]} has no ledger row" in text
    assert f"on ticket {tickets[3]} carries no key" in text


def key_comment(rt, ticket, key, want):
    body = {"Content": "<p>The ticket agent sets the status.</p>" + change_marker(want) + key_marker(key),
            "ContentType": "text/html", "TxnCustomFields": {CF_NAME: key}}
    assert rt.post(f"/ticket/{ticket}/comment", body).status == 201


def test_the_rt_oracle_judges_a_ticket_change_by_the_change_after_its_key_comment(rt_server):
    """Key comments are a change's attempts; the change after them is what must be `committed`."""
    rt = rt_server
    tickets = [rt.create_ticket(f"Oracle change {i}") for i in range(2)]
    task = task_create(rows=[TicketRow(row=i + 2, ticket_id=str(t), customer_email="x@example.com", subject="s",
                                       body="b") for i, t in enumerate(tickets)], name="oracle changes")
    landed, retried = (uuid.uuid4().hex * 2 for _ in range(2))
    for ticket, key in zip(tickets, (landed, retried), strict=True):
        e = effect(task, ticket, key, state=EffectState.FAILED)
        Effect.objects.filter(pk=e.pk).update(action="set_status", owner_step="set_status",
                                              slot=f"{task.pk}/i-{ticket}/set_status")
    key_comment(rt, tickets[0], landed, {"Status": "stalled"})
    assert rt.put(f"/ticket/{tickets[0]}", {"Status": "stalled"}).status == 200  # it landed; the ledger says failed
    key_comment(rt, tickets[1], retried, {"Status": "stalled"})  # two attempts, no change: nothing happened
    key_comment(rt, tickets[1], retried, {"Status": "stalled"})
    report = Report()
    RTOracle(rt).check_round(task, report)
    about_ledger = [p for p in report.problems if "RT" in p]  # (the task's own items are not done: not judged here)
    assert about_ledger == [f"task {task.pk}: set_status item i-{tickets[0]} changed the ticket in RT (1 change(s)) "
                            "but the ledger says failed"]
    assert report.duplicates == 0
