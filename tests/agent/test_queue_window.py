"""The queue shares the workers between tasks and forgets a cancelled task's work, with real rq workers.

A task keeps a window of jobs in Redis (QUEUE_WINDOW, 3 here); its other
items wait in the database and are sent as its items end; a new task's first
window goes to the front of the queue. So a small task uploaded behind a big
one is served at the next free worker, and cancelling a task takes its
waiting jobs out of Redis in the request. Orders of events are asserted,
never durations.
"""

import os
import subprocess
import sys

import pytest
from rq.job import Job

from ledger.models import Effect, EffectState
from ticketagent.models import Event, EventType, Item, ItemStatus, TaskStatus
from ticketagent.scheduling import jobs
from ticketagent.scheduling import window as window_module
from ticketagent.services.resume import task_resume
from ticketagent.services.tasks import task_cancel, task_pause

from ..conftest import ROOT, child_settings, wait_for
from ..factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)

WINDOW = 3


@pytest.fixture
def window(settings):
    settings.QUEUE_WINDOW = WINDOW
    return child_settings(QUEUE_WINDOW=WINDOW)


def task_queue(task):
    """The queue of the task's items: its helpdesk's."""
    return jobs.get_queue(window_module.task_queue(task.pk))


def waiting_job_ids(task) -> set[str]:
    ids = {jobs.job_id(pk, attempt) for pk, attempt in Item.objects.filter(task=task).values_list("pk", "attempt")}
    return ids & set(task_queue(task).get_job_ids())


def starts(task, after_id: int = 0) -> list[int]:
    return list(Event.objects.filter(task=task, type=EventType.ITEM_STARTED, id__gt=after_id)
                .order_by("id").values_list("id", flat=True))


class TestAWindowOfJobsPerTask:
    def test_only_the_window_goes_to_redis_and_the_rest_follows_as_items_end(self, workers, sandbox, window):
        task = make_task(8)
        assert len(waiting_job_ids(task)) == WINDOW == task_queue(task).count
        assert task.items.filter(enqueued_at__isnull=True).count() == 8 - WINDOW
        assert workers.burst(extra_env=window) == 0, workers.logs()
        assert set(task.items.values_list("status", flat=True)) == {ItemStatus.DONE}
        assert Event.objects.filter(task=task, type=EventType.ITEM_STARTED).count() == 8
        assert sandbox.counts()["duplicates"] == 0

    def test_the_sweep_sends_the_window_when_nothing_else_does(self, workers, sandbox, window):
        task = make_task(5)
        task_queue(task).empty()  # e.g. Redis lost its data
        Item.objects.filter(task=task).update(enqueued_at=None)
        workers.env.update(window)
        assert workers.command("recover").returncode == 0
        assert len(waiting_job_ids(task)) == WINDOW


class TestCancel:
    def test_cancel_takes_the_waiting_jobs_out_of_redis(self, workers, sandbox, window):
        task = make_task(10)
        waiting = waiting_job_ids(task)
        assert len(waiting) == WINDOW
        task_cancel(task_id=task.pk, actor="alice")
        assert waiting_job_ids(task) == set() and task_queue(task).count == 0
        conn = jobs.get_queue().connection
        assert not any(conn.exists(Job.key_for(job_id)) for job_id in waiting)
        assert set(task.items.values_list("status", flat=True)) == {ItemStatus.SKIPPED}
        cancelled = Event.objects.get(task=task, type=EventType.CANCELLED)
        assert cancelled.payload["withdrawn_jobs"] == WINDOW
        assert workers.burst(extra_env=window) == 0, workers.logs()
        assert starts(task) == []

    def test_no_item_starts_after_the_cancel_answers(self, workers, sandbox, window):
        sandbox.set_faults(latency_ms=100)  # items take a while: the cancel lands mid-run
        task = make_task(30)
        workers.start(2, extra_env=window)
        wait_for(lambda: Event.objects.filter(task=task, type=EventType.ITEM_DONE).count() >= 3,
                 timeout=60, message="three items done")
        task_cancel(task_id=task.pk, actor="alice")
        cancelled = Event.objects.get(task=task, type=EventType.CANCELLED).pk
        wait_for(lambda: not task.items.filter(status=ItemStatus.RUNNING).exists(), timeout=60,
                 message="the running items to end")
        wait_for(lambda: not waiting_job_ids(task), timeout=30, message="no job of the task left in Redis")
        assert starts(task, after_id=cancelled) == [], "an item started after the cancel"
        assert not task.items.filter(status=ItemStatus.QUEUED).exists()
        assert sandbox.counts()["duplicates"] == 0

    def test_pause_withdraws_and_resume_sends_again(self, workers, sandbox, window):
        task = make_task(6)
        task_pause(task_id=task.pk, actor="alice")
        assert waiting_job_ids(task) == set()
        task_resume(task_id=task.pk, actor="alice")
        assert len(waiting_job_ids(task)) == WINDOW
        assert workers.burst(extra_env=window) == 0, workers.logs()
        task.refresh_from_db()
        assert task.status == TaskStatus.COMPLETED


def test_a_new_tasks_first_window_goes_ahead_of_the_waiting_jobs_and_its_refills_behind(queue, window):
    from ticketagent.scheduling.window import window_refill

    big = make_task(5, prefix="B")
    small = make_task(5, prefix="S")
    ids = lambda task: [jobs.job_id(pk, 1) for pk in task.items.order_by("pk").values_list("pk", flat=True)]  # noqa: E731
    assert task_queue(small).get_job_ids() == ids(small)[:WINDOW] + ids(big)[:WINDOW]  # in item order
    Item.objects.filter(pk__in=small.items.order_by("pk").values_list("pk", flat=True)[:1]).update(
        status=ItemStatus.RUNNING)  # one of its items leased: its window has room for one more
    assert window_refill(small.pk) == 1
    assert task_queue(small).get_job_ids()[-1] == ids(small)[WINDOW]


def test_a_small_task_is_served_while_a_big_one_runs(workers, sandbox, window):
    sandbox.set_faults(latency_ms=50)
    big = make_task(40, prefix="B")
    workers.start(1, extra_env=window)
    wait_for(lambda: Event.objects.filter(task=big, type=EventType.ITEM_DONE).count() >= 3, timeout=60,
             message="the big task under way")
    small = make_task(3, prefix="S")
    created = Event.objects.get(task=small, type=EventType.TASK_CREATED).pk
    wait_for(lambda: Event.objects.filter(task=small, type=EventType.ITEM_DONE).count() == 3, timeout=60,
             message="the small task done")
    first_small = starts(small)[0]
    big_between = [pk for pk in starts(big, after_id=created) if pk < first_small]
    # its first window went ahead of the big task's: at most a big job the worker had already popped came first
    assert len(big_between) <= 1, (len(big_between), workers.logs())
    # and the small task finished while the big one still had items waiting
    last_small_done = Event.objects.filter(task=small, type=EventType.ITEM_DONE).order_by("-id").first().pk
    assert big.items.exclude(status=ItemStatus.DONE).exists(), "the big task had nothing left when the small one ended"
    # the worker goes on with the big task (its next start may still be on its way: waited for, not timed)
    wait_for(lambda: starts(big, after_id=last_small_done), timeout=60, message="the big task to go on")


class TestTheWorkerSettlesAnsweredUnknowns:
    def test_an_answered_unknown_is_settled_by_the_worker_itself(self, workers, sandbox, window):
        # a 408 is the helpdesk's own answer (a 5xx may be a gateway's, which proves nothing: it waits)
        sandbox.set_faults(error_next={"notify": 1}, error_status=408)
        task = make_task(1)
        assert workers.burst(extra_env=window) == 0, workers.logs()  # no recovery sweep runs
        item = task.items.get()
        assert item.status == ItemStatus.DONE, workers.logs()
        effect = Effect.objects.get(owner_item=str(item.pk), action="notify_customer")
        assert (effect.state, effect.attempts) == (EffectState.COMMITTED, 2)
        assert list(effect.transitions.values_list("to_state", flat=True)) == [
            "intent", "unknown", "failed", "intent", "committed"]
        assert sandbox.counts()["by_endpoint"]["notify"] == 1

    @pytest.mark.parametrize("fault", [{"drop_next": {"notify": 1}},
                                       {"error_next": {"notify": 1}, "error_status": 504}], ids=["drop", "504"])
    def test_an_unanswered_unknown_is_left_for_the_sweep_to_ask_once_it_cannot_land(self, workers, sandbox,
                                                                                   window, fault):
        sandbox.set_faults(**fault)
        task = make_task(1)
        assert workers.burst(extra_env=window) == 0, workers.logs()
        item = task.items.get()
        assert item.status == ItemStatus.WAITING_REVIEW
        effect = Effect.objects.get(owner_item=str(item.pk), action="notify_customer")
        assert (effect.state, effect.answered, effect.reconciled_at) == (EffectState.UNKNOWN, False, None)


def test_with_redis_down_the_items_wait_in_the_database_and_the_sweep_sends_them(sandbox, queue, window,
                                                                                   monkeypatch):
    import redis
    from rq import Queue

    from ticketagent.scheduling.recovery import recover_once

    down = Queue("down", connection=redis.Redis(port=1, socket_connect_timeout=0.2))
    monkeypatch.setattr(jobs, "get_queue", lambda name=None: down)
    task = make_task(5)  # the upload succeeds: Redis is transport
    assert not task.items.filter(enqueued_at__isnull=False).exists()
    monkeypatch.undo()
    recover_once()
    assert len(waiting_job_ids(task)) == WINDOW
    assert task.items.filter(enqueued_at__isnull=False).count() == WINDOW


def test_a_job_missing_from_redis_for_half_a_lease_is_sent_again_as_the_same_attempt(sandbox, queue, window,
                                                                                      settings):
    from django.utils import timezone

    from ticketagent.scheduling.recovery import JOB_MISSING, recover_once

    assert settings.REQUEUE_GRACE_SECONDS == settings.LEASE_SECONDS / 2
    task = make_task(1)
    item = task.items.get()
    queue.connection.flushdb()
    missing_since = timezone.now() - timezone.timedelta(seconds=settings.REQUEUE_GRACE_SECONDS + 1)
    Item.objects.filter(pk=item.pk).update(enqueued_at=missing_since)
    recover_once()
    assert waiting_job_ids(task) == {jobs.job_id(item.pk, item.attempt)}
    requeued = Event.objects.get(item=item, type=EventType.ITEM_REQUEUED)
    assert requeued.payload == {"attempt": item.attempt, "why": JOB_MISSING}


@pytest.mark.parametrize("lease, grace", [("30", "15.0"), ("4", "2.0"), ("1.5", "1.0")])
def test_the_requeue_grace_is_half_a_lease_and_at_least_a_second(lease, grace):
    """A deployment that still sets REQUEUE_GRACE_SECONDS changes nothing: the grace follows the lease."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "ticketagent.settings", "LEASE_SECONDS": lease,
           "REQUEUE_GRACE_SECONDS": "99"}
    script = "import django; django.setup(); from django.conf import settings; print(settings.REQUEUE_GRACE_SECONDS)"
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.strip() == grace, proc.stderr[-2000:]


def test_the_queue_keeps_one_redis_connection_and_replaces_one_redis_closed(queue):
    """A worker sends jobs at every lease: over one kept connection, not a new one (and its handshake) each
    time; a connection Redis closed (a restart, a kill) is replaced on the next send."""
    import redis

    assert jobs.get_queue() is jobs.get_queue()
    conn = jobs.get_queue().connection
    first = conn.client_id()
    assert jobs.enqueue_items([(10**9, 1)]) == 1
    assert conn.client_id() == first
    kwargs = conn.connection_pool.connection_kwargs
    other = redis.Redis(host=kwargs["host"], port=kwargs["port"], db=kwargs["db"])
    assert other.client_kill_filter(_id=first) == 1
    assert jobs.enqueue_items([(10**9 + 1, 1)]) == 1  # no error: the pool reconnected
    assert conn.client_id() != first
