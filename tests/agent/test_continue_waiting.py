"""Items waiting for review continue by one definition (`items_continuable`, one NOT EXISTS query): the
sweep's safety net continues exactly the items none of whose effects is open, and asks once per pass."""

import hashlib

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger.models import Effect, EffectClass, EffectState
from ticketagent.models import Item, ItemStatus, Task, TaskStatus
from ticketagent.scheduling.recovery import continue_waiting_items

from ..factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)


def _effect(item, state, n):
    key = hashlib.sha256(f"{item.pk}-{state}-{n}".encode()).hexdigest()
    return Effect.objects.create(
        idempotency_key=key,
        action="save_draft",
        effect_class=EffectClass.OVERWRITE,
        channel="helpdesk",
        state=state,
        owner_task=str(item.task_id),
        owner_item=str(item.pk),
        owner_step="save_draft",
        payload={"ticket": item.ticket_id},
        payload_hash=key,
        intent_at=timezone.now(),
    )


def test_only_items_with_no_open_effect_continue_and_the_pass_asks_once():
    task = make_task(5)
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.RUNNING, started_at=timezone.now())
    resolved, unknown, intent, no_effects, running = task.items.order_by("pk")
    Item.objects.filter(task=task).update(status=ItemStatus.WAITING_REVIEW)
    Item.objects.filter(pk=running.pk).update(status=ItemStatus.RUNNING)
    _effect(resolved, EffectState.COMMITTED, 1)
    _effect(resolved, EffectState.FAILED, 2)
    _effect(unknown, EffectState.COMMITTED, 1)
    _effect(unknown, EffectState.UNKNOWN, 2)
    _effect(intent, EffectState.INTENT, 1)
    _effect(running, EffectState.COMMITTED, 1)

    assert continue_waiting_items() == 2
    status = dict(Item.objects.filter(task=task).values_list("pk", "status"))
    assert status[resolved.pk] == status[no_effects.pk] == ItemStatus.QUEUED
    assert status[unknown.pk] == status[intent.pk] == ItemStatus.WAITING_REVIEW
    assert status[running.pk] == ItemStatus.RUNNING

    with CaptureQueriesContext(connection) as queries:
        assert continue_waiting_items() == 0
    assert len(queries) == 1, [q["sql"] for q in queries]
    assert "NOT (EXISTS" in queries[0]["sql"] or "NOT EXISTS" in queries[0]["sql"]
