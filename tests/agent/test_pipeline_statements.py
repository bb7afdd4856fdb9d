"""The pipeline's hand-written statements (`pipeline/statements.py`): the item locked only under its lease, and
only the item (the task is read: locking it here would invert the lock order); the task locked through its item
(to write it, or held as it is: a writer waits, another holder does not), and then the item only under its lease;
the checkpoint moved only from the cursor the worker knows; the lease's read: the item locked (only the item), with its
checkpoint and playbook version as the ORM would build them, and the database's clock."""

import gc
import weakref

import psycopg
import pytest
from django.db import connection, transaction

from ticketagent.llm.schemas import SCHEMA_VERSION
from ticketagent.models import Checkpoint, Item, ItemStatus, Task, TaskStatus
from ticketagent.pipeline.phases import lease_acquire
from ticketagent.pipeline.statements import (
    checkpoint_move,
    item_for_lease,
    lock_item,
    lock_task_and_item,
    lock_task_of_item,
)
from ticketagent.plan import PLAN_VERSION

from ..factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def held():
    """An item running under lease "tok", with a checkpoint at cursor 2."""
    task = make_task(1)
    item = task.items.get()
    Item.objects.filter(pk=item.pk).update(status=ItemStatus.RUNNING, lease_token="tok")
    Checkpoint.objects.create(item=item, task=task, cursor=2, step_outputs={"triage": {"category": "billing"}},
                              plan_version=PLAN_VERSION, schema_version=SCHEMA_VERSION, input_hash=item.input_hash(),
                              playbook_version_id=item.playbook_version_id)
    return item


def locked_elsewhere(table: str, pk: int, mode: str = "UPDATE") -> bool:
    """Whether another session finds the row locked against `FOR <mode>`."""
    params = connection.get_connection_params()
    with psycopg.connect(**{k: v for k, v in params.items() if k not in ("cursor_factory", "context")},
                         autocommit=True) as other:
        try:
            other.execute(f'SELECT 1 FROM "{table}" WHERE id = %s FOR {mode} NOWAIT', [pk])
        except psycopg.errors.LockNotAvailable:
            return True
    return False


def test_the_lease_holder_locks_the_item_and_reads_its_tasks_status(held):
    Task.objects.filter(pk=held.task_id).update(consecutive_failures=2)
    with transaction.atomic():
        assert lock_item(held.pk, "tok") == (TaskStatus.QUEUED, 2)
        assert locked_elsewhere(Item._meta.db_table, held.pk)
        assert not locked_elsewhere(held.task._meta.db_table, held.task_id)  # the task is read, not locked


@pytest.mark.parametrize("change", [{"lease_token": "other"}, {"status": ItemStatus.QUEUED}],
                         ids=["taken-over", "no-longer-running"])
def test_anyone_else_locks_nothing(held, change):
    Item.objects.filter(pk=held.pk).update(**change)
    with transaction.atomic():
        assert lock_item(held.pk, "tok") is None
        assert not locked_elsewhere(Item._meta.db_table, held.pk)
    assert lock_item(held.pk + 1000, "tok") is None  # no such item


def test_the_lease_locks_the_task_through_its_item_and_only_the_task(held):
    with transaction.atomic():
        task = lock_task_of_item(held.pk)
        assert (task.pk, task.name, task.status) == (held.task_id, held.task.name, TaskStatus.QUEUED)
        assert locked_elsewhere(task._meta.db_table, task.pk)
        assert not locked_elsewhere(Item._meta.db_table, held.pk)
    assert lock_task_of_item(held.pk + 1000) is None  # no such item


def test_the_lease_can_hold_the_task_as_it_is_beside_other_holders(held):
    with transaction.atomic():
        task = lock_task_of_item(held.pk, hold=True)
        assert (task.pk, task.status) == (held.task_id, TaskStatus.QUEUED)
        assert locked_elsewhere(task._meta.db_table, task.pk, "NO KEY UPDATE")  # a pause or cancel waits
        assert not locked_elsewhere(task._meta.db_table, task.pk, "SHARE")  # another item's lease does not
        assert not locked_elsewhere(Item._meta.db_table, held.pk)
    assert lock_task_of_item(held.pk + 1000, hold=True) is None  # no such item


def test_the_lease_holder_locks_the_task_then_the_whole_item(held):
    with transaction.atomic():
        task, item = lock_task_and_item(held.pk, "tok")
        assert task.pk == held.task_id and item.pk == held.pk
        assert (item.ticket_id, item.input_hash(), item.lease_token) == (held.ticket_id, held.input_hash(), "tok")
        assert locked_elsewhere(Item._meta.db_table, held.pk)
        assert locked_elsewhere(task._meta.db_table, task.pk)


@pytest.mark.parametrize("change", [{"lease_token": "other"}, {"status": ItemStatus.QUEUED}],
                         ids=["taken-over", "no-longer-running"])
def test_anyone_else_locks_the_task_but_not_the_item(held, change):
    Item.objects.filter(pk=held.pk).update(**change)
    with transaction.atomic():
        task, item = lock_task_and_item(held.pk, "tok")
        assert (task.pk, item) == (held.task_id, None)
        assert not locked_elsewhere(Item._meta.db_table, held.pk)
    assert lock_task_and_item(held.pk + 1000, "tok") == (None, None)  # no such item


def test_the_checkpoint_moves_only_from_the_cursor_the_worker_knows(held):
    outputs = {"triage": {"category": "billing"}, "draft": {"body": "Hello — «refund» noted", "n": [1, 2.5]}}
    with transaction.atomic():
        assert checkpoint_move(held.pk, cursor_from=2, cursor_to=3, outputs=outputs)
    checkpoint = Checkpoint.objects.get(item=held)
    assert (checkpoint.cursor, checkpoint.step_outputs) == (3, outputs)
    with transaction.atomic():
        assert not checkpoint_move(held.pk, cursor_from=2, cursor_to=4, outputs={})  # it is at 3 now
    checkpoint.refresh_from_db()
    assert (checkpoint.cursor, checkpoint.step_outputs) == (3, outputs)


def test_the_lease_reads_the_item_locked_with_its_checkpoint_version_and_the_databases_clock(held, django_assert_num_queries):
    Item.objects.filter(pk=held.pk).update(metadata={"plan": "pro", "seats": [1, 2]})
    expected = Item.objects.select_related("checkpoint", "playbook_version").get(pk=held.pk)
    with transaction.atomic():
        item, checkpoint, now = item_for_lease(held.pk)
        assert locked_elsewhere(Item._meta.db_table, held.pk)
        assert not locked_elsewhere(Task._meta.db_table, held.task_id)
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement_timestamp()")
            assert now <= cursor.fetchone()[0] and now.tzinfo is not None
    fields = [f.attname for f in Item._meta.concrete_fields]
    assert [getattr(item, f) for f in fields] == [getattr(expected, f) for f in fields]
    assert item.metadata == {"plan": "pro", "seats": [1, 2]} and item.input_hash() == expected.input_hash()
    assert (checkpoint.pk, checkpoint.cursor, checkpoint.step_outputs) == (
        expected.checkpoint.pk, 2, {"triage": {"category": "billing"}})
    assert checkpoint.item_id == item.pk and not item._state.adding and not checkpoint._state.adding
    with django_assert_num_queries(0):  # read with the item
        version = item.playbook_version
    assert (version.pk, version.content, version.format) == (
        expected.playbook_version.pk, expected.playbook_version.content, expected.playbook_version.format)
    assert item_for_lease(held.pk + 1000) is None  # no such item


def test_before_its_first_lease_an_item_has_no_checkpoint(held):
    Checkpoint.objects.filter(item_id=held.pk).delete()
    with transaction.atomic():
        item, checkpoint, _ = item_for_lease(held.pk)
    assert checkpoint is None and item.pk == held.pk


def test_the_first_lease_leaves_the_item_and_its_new_checkpoint_free_of_each_other():
    """Each is freed when its last reference goes, not left to the interpreter's rare full collection with its
    task and playbook version (a worker with many items in flight grew by ~20 MB over 1,600 items)."""
    task = make_task(1)
    item = task.items.get()
    gc.disable()
    try:
        outcome, leased, checkpoint = lease_acquire(item.pk, item.attempt, "tok")
        assert outcome == "" and checkpoint.item_id == leased.pk
        refs = [weakref.ref(leased), weakref.ref(checkpoint), weakref.ref(leased.playbook_version)]
        del leased, checkpoint
        assert [ref() for ref in refs] == [None, None, None]
    finally:
        gc.enable()
