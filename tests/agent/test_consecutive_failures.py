""""Consecutive" is in the order items finish, across workers: N failures with no success in between suspend a
task, and a success that finishes between two failures ends the run -- wherever the other items run, and
however close together they finish. The run of failures a task shows is the failures finished since its last
success, in the order their ends committed."""

import threading

import pytest
from django.db import connection

from ticketagent.llm.base import ModelError
from ticketagent.llm.offline import OfflineModel
from ticketagent.models import Event, EventType, Item, Task, TaskStatus
from ticketagent.pipeline import phases
from ticketagent.pipeline import run as run_module
from ticketagent.pipeline.run import item_process

from ..conftest import wait_for
from ..factories import make_task
from .test_effect_step import Crossings

pytestmark = pytest.mark.django_db(transaction=True)


class RefusingModel(OfflineModel):
    """A model that rejects every request: the item fails at its first step."""

    def triage(self, ticket, **kwargs):
        raise ModelError("bad_request", "the model API rejected the request (HTTP 400)")


def run(item: Item, model=None) -> str:
    item.refresh_from_db()
    return item_process(item_id=item.pk, attempt=item.attempt, model=model or OfflineModel())


def failures_since_the_last_success(task: Task) -> int:
    """The task's run of failures as its log tells it: ITEM_FAILED events after the last ITEM_DONE (an item's
    end writes its event under the locks that order it against the other items' ends)."""
    ends = list(Event.objects.filter(task=task, type__in=(EventType.ITEM_DONE, EventType.ITEM_FAILED))
                .order_by("id").values_list("type", flat=True))
    last_done = max((i for i, kind in enumerate(ends) if kind == EventType.ITEM_DONE), default=-1)
    return ends[last_done + 1:].count(EventType.ITEM_FAILED)


def test_a_failure_while_the_last_effect_is_called_is_ended_by_the_success_after_it(sandbox, queue, monkeypatch):
    """Item A reads the task's run of failures (none) in its phases; while A calls its last effect, item B
    fails (another worker); A's outcome then ends the item done -- after B's failure, so it ends that run. C
    fails next: one failure since A's success, not two, and the task (threshold 2) runs on."""
    task = make_task(4, failure_threshold=2)
    a, b, c, _ = task.items.order_by("row")

    def b_fails(step):
        if step == "escalate":  # A's last effect (its decision's last chosen action)
            assert run(b, RefusingModel()).startswith("failed at triage")

    Crossings(monkeypatch, after_perform=b_fails)
    assert run(a) == "done"
    monkeypatch.undo()
    assert run(c, RefusingModel()).startswith("failed at triage")
    task.refresh_from_db()
    assert [e for e in Event.objects.filter(task=task, type__in=(EventType.ITEM_DONE, EventType.ITEM_FAILED))
            .order_by("id").values_list("item_id", flat=True)] == [b.pk, a.pk, c.pk]
    assert (task.status, task.consecutive_failures) == (TaskStatus.RUNNING, 1), task.status_reason
    assert task.consecutive_failures == failures_since_the_last_success(task)


def test_a_failure_committed_while_a_success_ends_is_counted_in_the_order_they_finished(sandbox, queue,
                                                                                        monkeypatch):
    """Two connections: item A (a rehearsal's: it ends in its own phase) is inside the transaction that ends it
    done when item B's failure is recorded by another worker. Whichever commits first, the task's run of
    failures is what the order of their ends says."""
    task = make_task(2, failure_threshold=5, rehearsal=True)
    a, b = task.items.order_by("row")
    real_item_stop = phases.item_stop
    other = {}

    def b_fails():
        try:
            connection.ensure_connection()
            other["pid"] = connection.connection.info.backend_pid
            other["result"] = run(b, RefusingModel())
        finally:
            connection.close()

    def b_fails_meanwhile(run_a, *args, **kwargs):
        if run_a.item.pk == a.pk and "thread" not in other:
            other["thread"] = threading.Thread(target=b_fails)
            other["thread"].start()
            # B's failure has committed, or waits for a lock A's transaction holds
            wait_for(lambda: not other["thread"].is_alive() or b_waits_for_a_lock(other.get("pid")), timeout=60,
                     message="item B's failure to commit or to wait for item A's end")
        return real_item_stop(run_a, *args, **kwargs)

    monkeypatch.setattr(phases, "item_stop", b_fails_meanwhile)
    assert run(a) == "done"
    other["thread"].join(timeout=60)
    assert other["result"].startswith("failed at triage")
    task.refresh_from_db()
    assert task.consecutive_failures == failures_since_the_last_success(task)


def test_a_failure_just_before_an_item_ends_in_its_own_phase_is_ended_by_it(sandbox, queue, monkeypatch):
    """Item A (a rehearsal's: it ends in a phase of its own, after its decision's) read no failure in its last
    phase; item B fails before A's end begins. A's success finishes after B's failure and ends its run."""
    task = make_task(2, failure_threshold=5, rehearsal=True)
    a, b = task.items.order_by("row")
    real_phase_done = run_module.phase_done

    def b_fails_first(run_a):
        assert run(b, RefusingModel()).startswith("failed at triage")
        return real_phase_done(run_a)

    monkeypatch.setattr(run_module, "phase_done", b_fails_first)
    assert run(a) == "done"
    task.refresh_from_db()
    assert task.consecutive_failures == failures_since_the_last_success(task) == 0


def b_waits_for_a_lock(pid) -> bool:
    if pid is None:
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", [pid])
        return cursor.fetchone()[0] > 0


def test_an_item_the_model_api_refuses_says_why_in_the_worker_log(caplog):
    """A worker logs no line a model call (`LOG_LEVEL=INFO`): a refused request is still a line of its own."""
    task = make_task(1)
    with caplog.at_level("WARNING", logger="ticketagent.pipeline.run"):
        assert run(task.items.get(), RefusingModel()) == "failed at triage: bad_request"
    assert any(r.levelname == "WARNING" and "failed at triage: the model API rejected the request (HTTP 400)"
               in r.getMessage() for r in caplog.records), caplog.text
