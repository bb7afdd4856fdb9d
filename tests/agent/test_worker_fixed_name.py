"""A worker under a fixed name (systemd: `--name %H-worker-%i`), on real processes: killed and restarted at once,
it runs again within its lease time; started while a live worker holds the name, it waits and never displaces it.

rq alone refused the restarted worker ("There exists an active worker named ... already") until the killed one's
key expired: WORKER_TTL + 60 s when it died idle, its job's timeout + 60 s when it died busy.
"""

import signal
import time

import pytest
from django.conf import settings
from rq.executions import WORKER_EXECUTIONS_KEY_TEMPLATE

from ticketagent.models import Item, ItemStatus, Task, TaskStatus

from ..conftest import wait_for
from ..factories import make_task

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NAME = "fixed-host-worker-1"
KEY = f"rq:worker:{NAME}"
EXECUTIONS = WORKER_EXECUTIONS_KEY_TEMPLATE.format(NAME)


@pytest.fixture
def slow_model(openai_server):
    """The fake model answering each call after 0.5 s: a worker holds items when it is killed."""
    openai_server.latency = 0.5
    yield openai_server
    openai_server.latency = 0.0


def _registration(redis_conn) -> dict:
    return {k.decode(): v.decode() for k, v in redis_conn.hgetall(KEY).items()}


def _registered(redis_conn, child) -> dict | None:
    """The name's registration when it is `child`'s, alive (not marked dead) and in rq's worker sets."""
    held = _registration(redis_conn)
    if held.get("pid") != str(child.pid) or "death" in held or not redis_conn.sismember("rq:workers", KEY):
        return None
    return held


def _redis_now(redis_conn) -> float:
    seconds, micros = redis_conn.time()
    return seconds + micros / 1e6


def test_a_killed_worker_restarted_at_once_under_its_name_runs_within_its_lease(slow_model, workers, sandbox,
                                                                                 redis_conn):
    lease = settings.LEASE_SECONDS
    task = make_task(10)
    env = {**slow_model.worker_env, "WORKER_THREADS": "2"}
    started = time.monotonic()
    [first] = workers.start(1, extra_env=env, args=("--name", NAME))
    wait_for(lambda: _registered(redis_conn, first), timeout=90, message=lambda: f"the first worker\n{workers.logs()}")
    startup = time.monotonic() - started  # this machine's time, now, from a worker's spawn to its registration
    workers.start_recovery()
    wait_for(lambda: task.items.filter(status=ItemStatus.RUNNING).exists(), timeout=60, interval=0.05,
             message=lambda: f"an item in flight\n{workers.logs()}")
    held = set(task.items.filter(status=ItemStatus.RUNNING).values_list("pk", flat=True))
    last_seen = float(_registration(redis_conn)["seen"])
    executions = redis_conn.smembers(EXECUTIONS)
    assert executions, "the worker's executions of the items it holds"

    workers.kill(first, signal.SIGKILL)
    killed = time.monotonic()
    [second] = workers.start(1, extra_env=env, args=("--name", NAME))
    # the lease, then 5 s, plus the time a worker process takes to start on this machine (measured above, twice
    # for a noisy machine): rq alone refused the name for two minutes or more
    bound = lease + 5 + 2 * startup
    reg = wait_for(lambda: _registered(redis_conn, second), timeout=bound, interval=0.1,
                   message=lambda: f"the restarted worker registered under {NAME} within {bound:.0f} s\n{workers.logs()}")
    took = time.monotonic() - killed
    assert second.poll() is None, workers.logs()
    assert "took over the name from a dead worker" in workers.logs(), workers.logs()
    # not before the killed one counted as dead by the lease rule (its sign of life is whole seconds)
    assert float(reg["seen"]) >= last_seen + lease - 1, (reg, last_seen, lease)
    # the dead worker's registration was cleaned up with rq's own register_death: its executions are not the
    # newcomer's
    assert not executions & redis_conn.smembers(EXECUTIONS)

    # it takes work, and the killed worker's items are taken over by the sweep, as after any kill
    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.COMPLETED, timeout=120, interval=0.2,
             message=lambda: f"the task to finish after the restart\n{workers.logs()}")
    assert int(_registration(redis_conn).get("successful_job_count", 0)) >= 1, _registration(redis_conn)
    assert _registration(redis_conn)["pid"] == str(second.pid)
    assert Item.objects.filter(pk__in=held, attempt__gt=1).exists(), "the killed worker's items were taken over"
    assert sandbox.counts()["duplicates"] == 0, "no effect twice"
    print(f"registered {took:.1f} s after the kill (lease {lease:g} s, a worker's start-up {startup:.1f} s)")


def test_a_worker_started_under_the_name_of_a_live_one_waits_and_does_not_displace_it(slow_model, workers,
                                                                                       sandbox, redis_conn):
    lease = settings.LEASE_SECONDS
    env = {**slow_model.worker_env}
    [first] = workers.start(1, extra_env=env, args=("--name", NAME))
    wait_for(lambda: _registered(redis_conn, first), timeout=90, message=lambda: f"the first worker\n{workers.logs()}")
    birth = _registration(redis_conn)["birth"]
    [second] = workers.start(1, extra_env=env, args=("--name", NAME))
    wait_for(lambda: "the name is held by a live worker" in workers.logs(), timeout=90,
             message=lambda: f"the second worker saying it waits\n{workers.logs()}")
    waiting = next(line for line in workers.logs().splitlines() if "the name is held by a live worker" in line)
    assert f"pid {first.pid}" in waiting and "counts as dead once silent for" in waiting, waiting

    # several lease times later, the live worker still holds its registration, and takes work
    deadline = time.monotonic() + 3 * lease
    while time.monotonic() < deadline:
        held = _registration(redis_conn)
        assert held.get("pid") == str(first.pid) and held.get("birth") == birth and "death" not in held, held
        assert first.poll() is None, workers.logs()
        time.sleep(0.2)
    assert second.poll() is None, f"the second worker waits, it does not exit\n{workers.logs()}"
    task = make_task(3)
    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.COMPLETED, timeout=90, interval=0.2,
             message=lambda: f"the live worker to run a task\n{workers.logs()}")
    assert _registration(redis_conn)["pid"] == str(first.pid)
    assert "took over" not in workers.logs()

    # once the live one dies, the waiting one takes over
    workers.kill(first, signal.SIGKILL)
    wait_for(lambda: _registered(redis_conn, second), timeout=lease + 60, interval=0.1,
             message=lambda: f"the waiting worker to take over once the first died\n{workers.logs()}")
    last = make_task(2)
    wait_for(lambda: Task.objects.get(pk=last.pk).status == TaskStatus.COMPLETED, timeout=90, interval=0.2,
             message=lambda: f"the worker that took over to run a task\n{workers.logs()}")
    assert sandbox.counts()["duplicates"] == 0


def test_a_paused_worker_whose_name_was_taken_over_stops_and_leaves_the_registration(slow_model, workers, sandbox,
                                                                                       redis_conn):
    """Paused (SIGSTOP) for longer than a lease, a worker counts as dead: a newcomer takes its name over. Woken, the
    old one finds another worker's registration under its name: it stops, and does not unregister the newcomer."""
    lease = settings.LEASE_SECONDS
    [first] = workers.start(1, extra_env=slow_model.worker_env, args=("--name", NAME))
    wait_for(lambda: _registered(redis_conn, first), timeout=90, message=lambda: f"the first worker\n{workers.logs()}")
    first.signal(signal.SIGSTOP, descendants=False)
    try:
        [second] = workers.start(1, extra_env=slow_model.worker_env, args=("--name", NAME))
        wait_for(lambda: _registered(redis_conn, second), timeout=lease + 90, interval=0.1,
                 message=lambda: f"the newcomer to take the paused worker's name over\n{workers.logs()}")
    finally:
        first.signal(signal.SIGCONT, descendants=False)
    assert first.wait(timeout=60) is not None, workers.logs()
    assert "another worker took this name over" in workers.logs(), workers.logs()
    assert _registered(redis_conn, second), (_registration(redis_conn), workers.logs())
    task = make_task(2)
    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.COMPLETED, timeout=90, interval=0.2,
             message=lambda: f"the worker holding the name to run a task\n{workers.logs()}")
    assert _registered(redis_conn, second)
