"""The recovery sweep runs inside the workers: one holds it at a time (a PostgreSQL advisory lock on a session
of its own), and another takes it over when the holder is killed (at once: its session ends with its socket)
or paused (its silent session is ended by the server after a lease: idle_session_timeout). The holder's rq
hash says it sweeps (the Workers page), and an item the killed holder had leased is recovered by the next."""

import signal

import pytest
from django.db import connection

from ticketagent.models import ItemStatus, Task, TaskStatus
from ticketagent.scheduling.sweep import sweep_holder

from ..conftest import wait_for
from ..factories import make_task

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _said(worker, words: str) -> bool:
    """In its whole log (a job's traceback may follow a line at once, past any tail)."""
    return any(words in line for line in worker.printed())


def _holder_pid() -> int | None:
    connection.close()  # a fresh look each time: this test's session holds nothing
    holder = sweep_holder()
    return int(holder.rsplit(":", 1)[1]) if holder else None


def test_one_worker_sweeps_and_another_takes_over_when_it_is_killed_or_paused(workers, sandbox, queue, settings):
    sandbox.set_faults(latency_ms=60_000)  # the helpdesk holds each call: items stay leased by their workers
    [alone] = workers.start(1, sweep=True)
    wait_for(lambda: _holder_pid() == alone.pid, timeout=120, message="the only worker sweeping")
    task = make_task(2)
    wait_for(lambda: task.items.filter(status=ItemStatus.RUNNING, lease_owner__contains=f":{alone.pid}:").exists(),
             timeout=120, message="the sweeping worker holding an item's lease")
    others = {w.pid: w for w in workers.start(2, sweep=True)}
    wait_for(lambda: all(_said(w, "recovery at start") and not _said(w, "sweeps now") for w in others.values()),
             timeout=120, message="two more workers up, not sweeping")
    assert _holder_pid() == alone.pid

    # killed while it holds an item's lease: another worker takes the sweep at once and recovers the item
    workers.kill(alone, signal.SIGKILL)
    second = wait_for(lambda: _holder_pid() in others and _holder_pid(), timeout=60,
                      message="another worker taking the sweep over")
    wait_for(lambda: not task.items.filter(status=ItemStatus.RUNNING, lease_owner__contains=f":{alone.pid}:").exists(),
             timeout=60, message="the killed worker's item recovered by the new holder's sweep")

    # paused: its session goes silent and the server ends it after a lease; the third takes over
    [third_worker] = [w for pid, w in others.items() if pid != second]
    workers.kill(others[second], signal.SIGSTOP, horse=False)
    try:
        wait_for(lambda: _holder_pid() == third_worker.pid, timeout=settings.LEASE_SECONDS + 60,
                 message="the third worker taking the sweep over")
    finally:
        workers.kill(others[second], signal.SIGCONT, horse=False)
    # the woken worker finds its session ended and does not sweep beside the third
    wait_for(lambda: _said(others[second], "no longer sweeps"), timeout=60,
             message=lambda: f"the woken worker noticing it no longer sweeps\n{others[second].tail()}")
    assert _holder_pid() == third_worker.pid
    sandbox.set_faults(latency_ms=0)
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.PAUSED)  # nothing more to do in this test
