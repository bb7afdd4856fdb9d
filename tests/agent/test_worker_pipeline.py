"""Items are processed by real RQ worker processes on real Redis."""

import pytest
from django.db.models import Count

from ledger.models import Effect, EffectState
from ticketagent.models import Approval, Event, EventType, Item, ItemStatus, TaskStatus
from ticketagent.scheduling import jobs

from ..factories import make_task, suspended_task

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.smoke
def test_a_burst_worker_drives_every_item_to_done(workers, sandbox):
    task = make_task(5)
    # the task's first window went to Redis (4: no worker had registered yet); the rest as items end
    # (on the queue of its helpdesk: the sandbox's)
    assert len(workers.env["REDIS_URL"]) and jobs.get_queue(jobs.queue_name(task.helpdesk_id)).count == 4
    assert task.items.filter(enqueued_at__isnull=True).count() == 1
    assert workers.burst() == 0, workers.logs()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, workers.logs()
    assert set(task.items.values_list("status", flat=True)) == {ItemStatus.DONE}
    # every effect the decisions chose went out once, and the ledger agrees
    committed = Effect.objects.filter(owner_task=str(task.pk), state=EffectState.COMMITTED)
    counts = sandbox.counts()
    assert counts["deliveries"] == committed.count() > 0
    assert counts["duplicates"] == 0
    assert Event.objects.filter(task=task, type=EventType.ITEM_DONE).count() == 5


@pytest.mark.smoke
def test_an_item_enqueued_twice_is_processed_once(workers, sandbox):
    task = make_task(1)
    item = task.items.get()
    assert jobs.enqueue_items([(item.pk, item.attempt)]) == 0, "the same attempt is one job (unique id)"
    # even a second job for the item (a stale or duplicated job) does no work twice
    jobs.get_queue().enqueue(jobs.JOB_FUNCTION, item.pk, item.attempt, job_id=f"item-{item.pk}-dup")
    assert workers.burst() == 0, workers.logs()
    item.refresh_from_db()
    assert item.status == ItemStatus.DONE
    assert Event.objects.filter(item=item, type=EventType.ITEM_STARTED).count() == 1
    assert sandbox.counts()["duplicates"] == 0
    assert sandbox.counts()["by_endpoint"]["notify"] == 1


def test_close_waits_for_approval_unless_the_task_allows_it(workers, sandbox):
    from ticketagent.services.items import item_approve

    thanks = dict(subject="Thanks", body="Great support, thank you! You can close this ticket.")
    waiting = make_task(2, **thanks)
    auto = make_task(1, allow_auto_close=True, data=None, **thanks)
    assert workers.burst() == 0, workers.logs()
    assert set(waiting.items.values_list("status", flat=True)) == {ItemStatus.WAITING_APPROVAL}
    assert auto.items.get().status == ItemStatus.DONE
    assert sandbox.counts()["by_endpoint"]["close"] == 1
    waiting.refresh_from_db()
    assert waiting.status == TaskStatus.NEEDS_REVIEW

    first, second = waiting.items.order_by("row")
    item_approve(item_id=first.pk, decision=Approval.APPROVED, reason="customer is happy", actor="alice")
    item_approve(item_id=second.pk, decision=Approval.REJECTED, reason="keep it open", actor="alice")
    assert workers.burst() == 0, workers.logs()
    assert dict(waiting.items.values_list("status").annotate(n=Count("id"))) == {ItemStatus.DONE: 2}
    assert sandbox.counts()["by_endpoint"]["close"] == 2
    waiting.refresh_from_db()
    assert waiting.status == TaskStatus.COMPLETED


def test_consecutive_failures_suspend_the_task_and_nothing_more_runs(workers, sandbox):
    task = suspended_task(workers, sandbox, 6, failure_threshold=2, failing_endpoint="draft")
    assert task.status_reason.startswith("2 consecutive failures")
    statuses = dict(task.items.values_list("status").annotate(n=Count("id")))
    assert statuses[ItemStatus.FAILED] == 2 and statuses[ItemStatus.QUEUED] == 4, statuses
    assert Item.objects.filter(task=task, status=ItemStatus.FAILED).first().last_error.startswith("save_draft")
