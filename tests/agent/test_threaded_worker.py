"""Many items in flight in one worker process (WORKER_THREADS), on real processes with the fake model server.

Leases, fencing and recovery keep their meaning: a SIGKILL of the process
ends every item it holds and each is taken over; a SIGTERM takes no job more
and finishes what its threads hold; a burst worker quits only once the queue is
empty and no thread is busy.
"""

import signal
import threading

import pytest

from ticketagent.models import Item, ItemStatus, Task, TaskStatus

from ..conftest import wait_for
from ..factories import make_task

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

THREADS = 8


@pytest.fixture
def slow_model(openai_server):
    """The fake model answering each call after 0.5 s: items overlap in a worker's threads."""
    openai_server.latency = 0.5
    yield openai_server
    openai_server.latency = 0.0


class Peak:
    """The most items running at once, read from the database while workers run."""

    def __init__(self, task):
        self.task, self.most, self._stop = task, 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        from django.db import connection

        try:
            while not self._stop.wait(0.05):
                running = Item.objects.filter(task=self.task, status=ItemStatus.RUNNING).count()
                self.most = max(self.most, running)
        finally:
            connection.close()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)


def test_one_burst_worker_runs_many_items_at_once_and_quits_when_all_are_done(slow_model, workers, sandbox):
    task = make_task(24)
    with Peak(task) as peak:
        assert workers.burst(extra_env={**slow_model.worker_env, "WORKER_THREADS": str(THREADS)}) == 0, \
            workers.logs()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, workers.logs()
    assert peak.most > 4, "items overlap in one process, beyond a window of twice one worker (it counts threads)"
    assert peak.most <= THREADS, "never more than the process's threads"
    counts = sandbox.counts()
    assert counts["duplicates"] == 0 and counts["by_endpoint"]["notify"] == 24


def test_a_killed_process_holding_many_items_has_each_taken_over(slow_model, workers, sandbox):
    task = make_task(12)
    env = {**slow_model.worker_env, "WORKER_THREADS": str(THREADS)}
    [victim] = workers.start(1, extra_env=env)
    wait_for(lambda: task.items.filter(status=ItemStatus.RUNNING).count() >= 4, timeout=60, interval=0.05,
             message="several items in flight in one process")
    held = set(task.items.filter(status=ItemStatus.RUNNING).values_list("pk", flat=True))
    workers.kill(victim, signal.SIGKILL)
    workers.start(1, extra_env=env)
    workers.start_recovery()
    wait_for(lambda: task.items.filter(status=ItemStatus.DONE).count() == 12, timeout=120, interval=0.2,
             message=lambda: f"the batch to finish after the kill\n{workers.logs()}")
    # The task closes once its last item's end has committed (the worker's on-commit step, or the sweep):
    # a moment after the last item reads done.
    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.COMPLETED, timeout=30, interval=0.2,
             message=lambda: f"the task to close after its last item\n{workers.logs()}")
    taken_over = Item.objects.filter(pk__in=held, attempt__gt=1).count()
    assert taken_over >= 1, "the killed process's items were taken over by the sweep"
    assert sandbox.counts()["duplicates"] == 0, "no effect twice"


def test_a_stop_takes_no_job_more_and_finishes_what_its_threads_hold(slow_model, workers, sandbox):
    task = make_task(40)
    [worker] = workers.start(1, extra_env={**slow_model.worker_env, "WORKER_THREADS": "4"})
    wait_for(lambda: task.items.filter(status=ItemStatus.RUNNING).count() >= 2, timeout=60, interval=0.05,
             message="items in flight")
    workers.kill(worker, signal.SIGTERM, horse=False)
    assert worker.wait(timeout=60) == 0, workers.logs()
    assert not task.items.filter(status=ItemStatus.RUNNING).exists(), "the items in flight were finished"
    assert task.items.filter(status=ItemStatus.DONE).count() < 40, "no job was taken after the stop"
    assert sandbox.counts()["duplicates"] == 0


def test_a_worker_whose_threads_have_all_ended_says_it_is_idle(slow_model, workers, sandbox, queue):
    """rq marks a worker idle only before its main thread's next dequeue, and a thread that ends a job takes the
    next itself: the main thread may wait for a job meanwhile, with the worker still marked busy (the Workers
    page said "busy, 0 of 4 threads busy"). The last thread to end marks it idle."""
    from rq import Worker as RQWorker

    task = make_task(6)
    [worker] = workers.start(1, extra_env={**slow_model.worker_env, "WORKER_THREADS": "4"})

    def state():
        return {w.pid: w.get_state() for w in RQWorker.all(queue=queue)}.get(worker.pid)

    wait_for(lambda: state() == "busy", timeout=60, interval=0.05, message="the worker busy with the items")
    wait_for(lambda: task.items.filter(status=ItemStatus.DONE).count() == 6, timeout=60, message="every item done")
    wait_for(lambda: state() == "idle", timeout=15, message="the worker marked idle once its threads are done")
