"""A task is bound to the helpdesk it was created for (the identity the helpdesk reports); an item of it met by a
worker serving another helpdesk is handed back untouched; a task not bound yet is bound on a worker's first contact.

The real worker processes, the Workers page and the queue routing are in tests/browser/test_helpdesk_binding.py;
here the lease's own check, run in this process against real sandbox helpdesks."""

import json
import urllib.request

import pytest
from django.utils import timezone

from ledger.models import Effect
from ticketagent.llm.offline import OfflineModel
from ticketagent.models import Event, EventType, Item, ItemStatus, Task
from ticketagent.pipeline.run import item_process

from ..factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)

NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing answers


def reported(sandbox) -> str:
    with urllib.request.urlopen(sandbox.base_url + "/api/helpdesk", timeout=10) as answer:
        return json.loads(answer.read())["instance"]


def run(item: Item) -> str:
    item.refresh_from_db()
    return item_process(item_id=item.pk, attempt=item.attempt, model=OfflineModel())


def test_a_task_records_the_identity_its_helpdesk_reports_with_its_kind_and_url(sandbox, other_sandbox):
    task = make_task(2)
    assert reported(sandbox) != reported(other_sandbox)  # two helpdesks, two identities
    assert task.helpdesk_id == f"rest|{reported(sandbox)}"
    assert (task.helpdesk_kind, task.helpdesk_url) == ("rest", sandbox.base_url)
    created = Event.objects.get(task=task, type=EventType.TASK_CREATED)
    assert created.payload["helpdesk"] == f"rest helpdesk at {sandbox.base_url} (rest|{reported(sandbox)})"


def test_an_item_met_by_a_worker_of_another_helpdesk_is_handed_back_untouched(sandbox, other_sandbox, settings):
    task = make_task(2, allow_auto_close=True)
    item = task.items.order_by("row").first()
    settings.HELPDESK_URL = other_sandbox.base_url  # this process now serves helpdesk B

    outcome = run(item)
    assert outcome.startswith("no work: bound to another helpdesk: ") and f"task {task.pk} is bound to" in outcome
    assert f"this worker serves rest helpdesk at {other_sandbox.base_url}" in outcome
    item.refresh_from_db()
    assert (item.status, item.attempt, item.lease_owner) == (ItemStatus.QUEUED, 2, "")  # back to its task's queue
    requeued = Event.objects.get(item=item, type=EventType.ITEM_REQUEUED)
    assert requeued.payload["why"].startswith("not taken: bound to another helpdesk")
    assert not Event.objects.filter(task=task, type=EventType.ITEM_STARTED).exists()
    assert not Effect.objects.filter(owner_task=str(task.pk)).exists()
    assert other_sandbox.counts()["deliveries"] == 0 and sandbox.counts()["deliveries"] == 0

    settings.HELPDESK_URL = NOWHERE  # a worker that cannot tell which helpdesk it serves takes nothing either
    outcome = run(item)
    assert "this worker cannot tell which helpdesk it serves" in outcome, outcome

    settings.HELPDESK_URL = sandbox.base_url  # the task's own helpdesk: the item runs
    assert run(item) == "done"
    assert sandbox.counts()["deliveries"] > 0 and other_sandbox.counts()["deliveries"] == 0


def test_a_task_created_while_its_helpdesk_did_not_answer_is_bound_on_a_workers_first_contact(sandbox, settings):
    settings.HELPDESK_URL = NOWHERE
    settings.HELPDESK_CHECK_BEFORE_TASKS = False
    task = make_task(2, allow_auto_close=True)
    assert task.helpdesk_id is None
    created = Event.objects.get(task=task, type=EventType.TASK_CREATED)
    assert created.payload["helpdesk"].startswith("not bound: the helpdesk did not say who it is")

    settings.HELPDESK_URL = sandbox.base_url
    assert run(task.items.order_by("row").first()) == "done"
    task.refresh_from_db()
    assert task.helpdesk_id == f"rest|{reported(sandbox)}" and task.helpdesk_url == sandbox.base_url
    bound = Event.objects.get(task=task, type=EventType.HELPDESK_BOUND)
    assert "bound on a worker's first contact" in bound.payload["why"]
    assert bound.payload["helpdesk"] == Task.objects.get(pk=task.pk).helpdesk_label


def test_a_task_from_before_tasks_were_bound_keeps_working_and_is_bound_on_first_contact(sandbox):
    task = make_task(1, allow_auto_close=True)
    Task.objects.filter(pk=task.pk).update(helpdesk_id=None, helpdesk_kind="", helpdesk_url="")  # as migrated
    assert run(task.items.get()) == "done"
    task.refresh_from_db()
    assert task.helpdesk_id == f"rest|{reported(sandbox)}"
    assert Event.objects.filter(task=task, type=EventType.HELPDESK_BOUND).count() == 1


def test_a_rehearsal_sends_nothing_so_any_worker_runs_it(sandbox, other_sandbox, settings):
    task = make_task(1, rehearsal=True)
    settings.HELPDESK_URL = other_sandbox.base_url
    assert run(task.items.get()) == "done"


def test_a_worker_of_another_helpdesk_does_not_take_over_an_expired_lease(sandbox, other_sandbox, settings):
    """A take-over is a write (the old lease's intents become unknown): left to the sweep and the task's workers."""
    task = make_task(1, allow_auto_close=True)
    item = task.items.get()
    Item.objects.filter(pk=item.pk).update(status=ItemStatus.RUNNING, lease_owner="gone-host:1", lease_token="old",
                                           lease_expires_at=timezone.now() - timezone.timedelta(seconds=60))
    settings.HELPDESK_URL = other_sandbox.base_url
    outcome = run(item)
    assert outcome.startswith("no work: item is running; bound to another helpdesk"), outcome
    item.refresh_from_db()
    assert (item.status, item.lease_token, item.attempt) == (ItemStatus.RUNNING, "old", 1)
    assert not Event.objects.filter(item=item, type__in=(EventType.RECOVERED, EventType.ITEM_REQUEUED)).exists()
