"""A checkpoint belongs to the input it was computed from."""

import pytest

from ledger.faults import SimulatedCrash, arm
from ledger.models import Effect
from ticketagent.models import Event, EventType, Item, ItemStatus
from ticketagent.pipeline.run import item_process
from ticketagent.services.resume import task_resume

from ..factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_item_whose_ticket_changed_is_not_silently_continued(sandbox, queue):
    task = make_task(1)
    item = task.items.get()
    arm("before_intent")  # die before any effect
    with pytest.raises(SimulatedCrash):
        item_process(item_id=item.pk, attempt=item.attempt)
    # triage, draft and decide are persisted: the first effect's intent has a phase of its own
    assert item.checkpoint.cursor == 3

    Item.objects.filter(pk=item.pk).update(body="A completely different request.", status=ItemStatus.FAILED,
                                           lease_token="")
    task_resume(task_id=task.pk, actor="tester")
    item.refresh_from_db()
    assert item_process(item_id=item.pk, attempt=item.attempt).startswith("no work: input changed")
    item.refresh_from_db()
    assert item.status == ItemStatus.FAILED and item.failure_kind == "input_changed"
    assert "changed since its checkpoint" in item.last_error
    assert Effect.objects.count() == 0 and sandbox.counts()["deliveries"] == 0
    assert Event.objects.filter(item=item, type=EventType.ITEM_FAILED, payload__kind="input_changed").exists()
