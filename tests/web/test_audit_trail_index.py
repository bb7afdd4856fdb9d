"""The review page's audit trail reads its decisions through a partial index
(`event_audit_idx`, its condition `AUDIT_EVENTS`): since an effect's verdicts
are recorded in the ledger's transitions only, those task events are rare,
and without the index the page read the whole event log backwards looking
for 30 of them (291 ms at 315k events; docs/benchmarks.md, "Profiling")."""

import pytest
from django.db import connection, transaction

from tests.factories import make_task
from ticketagent.models import AUDIT_EVENTS, Event, EventType, ItemStatus
from ticketagent.web.selectors.review import audit_trail

pytestmark = pytest.mark.django_db


def test_the_planner_can_answer_the_trail_from_the_partial_index():
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        plan = Event.objects.filter(AUDIT_EVENTS).order_by("-id")[:30].explain()
    assert "event_audit_idx" in plan, plan


def test_the_trail_shows_each_kind_of_decision_and_nothing_else():
    task = make_task(3)
    item = task.items.order_by("pk").first()
    for type_, payload in ((EventType.APPROVED, {"reason": "ok"}),
                           (EventType.ITEM_SKIPPED, {"was": ItemStatus.FAILED, "reason": "bad ticket"}),
                           (EventType.ITEM_SKIPPED, {"was": ItemStatus.QUEUED, "reason": "task cancelled"}),
                           (EventType.ITEM_REQUEUED, {"why": "retried by an operator", "attempt": 2}),
                           (EventType.ITEM_REQUEUED, {"why": "its job vanished", "attempt": 2}),
                           (EventType.STEP_DONE, {"step": "triage"})):
        Event.objects.create(task=task, item=item, type=type_, payload=payload, actor="ops")
    shown = [(e.type, e.payload.get("was") or e.payload.get("why") or "") for e in audit_trail()]
    assert sorted(shown) == sorted([(EventType.APPROVED, ""), (EventType.ITEM_SKIPPED, ItemStatus.FAILED),
                                    (EventType.ITEM_REQUEUED, "retried by an operator")])
