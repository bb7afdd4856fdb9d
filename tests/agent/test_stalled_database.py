"""Workers that are slow instead of dead: their database answers stall, or their link is cut silently.

A SIGKILLed worker closes its socket and never wakes up; these do wake up
(or stay half-open), which is what a sleeping laptop, a stalled VM or a
lost network does. Each worker under test talks to PostgreSQL through its
own `ops.faultproxy.FaultProxy`; the sandbox ignores idempotency keys, so a
call made twice is delivered twice and counted.
"""

import os
import signal
import threading
import time

import pytest
from django.conf import settings
from django.db import OperationalError, connection

from ledger.models import Effect, EffectState
from ops.faultproxy import FaultProxy
from ops.processes import database_url
from ticketagent.models import Event, EventType, Item, ItemStatus, Task, TaskStatus

from ..conftest import wait_for
from ..factories import make_task

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

INTENT_STATEMENT = b'INSERT INTO "ledger_effect"'


@pytest.fixture
def proxy():
    with FaultProxy.in_front_of(database_url()) as running:
        yield running


def via(proxy: FaultProxy) -> str:
    """The test database's URL, through the proxy."""
    return proxy.url(database_url())


def idle_in_transaction_holding(row) -> bool:
    """A session other than ours, idle in transaction, holding the lock of `row` (a model instance)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND "
                       "state = 'idle in transaction' AND pid <> pg_backend_pid()")
        if not cursor.fetchone()[0]:
            return False
        try:
            cursor.execute(f'SELECT 1 FROM "{row._meta.db_table}" WHERE id = %s FOR NO KEY UPDATE NOWAIT',
                           [row.pk])
        except OperationalError:
            return True  # locked by the cut worker's open transaction
    return False


def delivered_once(task: Task, sandbox) -> dict:
    """Every delivery at the key-ignoring sandbox, per key: each committed effect exactly once."""
    effects = dict(Effect.objects.filter(owner_task=str(task.pk)).values_list("idempotency_key", "state"))
    counts: dict[str, int] = {}
    for delivery in sandbox.deliveries():
        if delivery["key"] in effects:
            counts[delivery["key"]] = counts.get(delivery["key"], 0) + 1
    assert {key: n for key, n in counts.items() if n > 1} == {}, "delivered twice"
    assert set(counts) == {key for key, state in effects.items() if state == EffectState.COMMITTED}
    return counts


def aim_at(proxy: FaultProxy, nth: int, seconds: float, then) -> None:
    """Hold the answers on the connection that sends the `nth` intent statement from now, and call `then()`."""
    if nth == 1:
        proxy.stall_next(INTENT_STATEMENT, seconds, on_match=then)
    else:
        proxy.stall_next(INTENT_STATEMENT, 0, on_match=lambda: aim_at(proxy, nth - 1, seconds, then))


@pytest.mark.parametrize("nth", [1, 2], ids=["first-intent", "second-intent"])
def test_a_worker_whose_answers_stall_past_its_lease_makes_no_call(workers, sandbox, proxy, nth):
    """A statement that writes an effect's intent reaches PostgreSQL; its
    answer (and every other answer to that worker) is held past the lease.
    Each intent is written in its own phase's transaction (the first
    effect's, or the second's after the first was sent): the server ends
    the idle transaction, nothing of it stays. Either way the sweep
    takes the item over, the effect is settled and sent once by another
    worker, and the stalled one wakes up and sends nothing."""
    sandbox.set_faults(honor_keys=False)
    stall = settings.LEASE_SECONDS * 3 + 4  # past the take-over, the settle time and the retry
    matched = []
    aim_at(proxy, nth, stall, lambda: (matched.append(time.monotonic()), proxy.stall(stall)))
    task = make_task(1)
    item = task.items.get()
    [victim] = workers.start(1, extra_env={"DATABASE_URL": via(proxy)})
    wait_for(lambda: matched, timeout=60, message="the worker's intent statement")
    workers.start_recovery()
    workers.start(1)
    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.COMPLETED, timeout=90,
             message="the task to finish without the stalled worker")
    assert Event.objects.filter(item=item, type=EventType.RECOVERED).exists()
    wait_for(lambda: time.monotonic() > matched[0] + stall + 3, timeout=stall + 10, message="the stall to end")
    woke = ("nothing more called or written", "server closed the connection", "idle-in-transaction timeout")
    try:
        wait_for(lambda: any(line in victim.log_path.read_text() for line in woke), timeout=15,
                 message="the stalled worker to wake up and stop")
    except AssertionError:
        raise AssertionError(victim.log_path.read_text()[-4000:]) from None
    time.sleep(2)  # it has woken: a call it made then would have landed by now
    delivered_once(task, sandbox)


def test_a_worker_cut_off_mid_transaction_freezes_nothing(workers, sandbox, proxy, redis_conn):
    """A silent cut while the worker holds its item's row lock in an open
    transaction (the next phase after its lease: the item locked, COMMIT not
    sent) -- the lock the sweep's take-over, a pause or a cancel then waits
    for: its session is left idle in transaction on the server,
    its client waits on a half-open socket. The item runs again
    within lease time + 5 s while the connection is still half-open;
    meanwhile the sweep goes on with another task, whose worker was killed,
    and that task finishes too."""
    from rq import Worker

    sandbox.set_faults(honor_keys=False, latency_ms=200)
    [spare] = workers.start(1)  # the one healthy worker, paused until the others are in place
    wait_for(lambda: len(Worker.all(connection=redis_conn)) >= 1, timeout=60, message="the spare worker")
    os.kill(spare.pid, signal.SIGSTOP)
    workers.start_recovery()
    cut = []

    def cut_soon():  # once the statement has reached the server and run, its answer held
        threading.Timer(0.3, lambda: (proxy.drop(), cut.append(time.monotonic()))).start()

    lost_task = make_task(1, prefix="LOST")
    lost_item = lost_task.items.get()
    workers.start(1, extra_env={"DATABASE_URL": via(proxy)})
    wait_for(lambda: Item.objects.get(pk=lost_item.pk).status == ItemStatus.RUNNING, timeout=60,
             message="the worker to lease its item")
    # its next lock of its item: the transaction of a step's recovery point, or of an effect's intent or outcome
    proxy.stall_next((b"SELECT t.status", b"FOR NO KEY UPDATE OF i"), 600, on_match=cut_soon)
    wait_for(lambda: cut, timeout=60, message="the cut")
    # the premise: its session is left idle in a transaction that holds the item's row lock
    try:
        wait_for(lambda: idle_in_transaction_holding(lost_item), timeout=3, interval=0.1,
                 message="the cut worker's session to sit idle in transaction, holding the item's lock")
    except AssertionError:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pid, state, left(query, 120) FROM pg_stat_activity WHERE datname = "
                           "current_database()")
            raise AssertionError(cursor.fetchall()) from None
    assert Item.objects.get(pk=lost_item.pk).status == ItemStatus.RUNNING
    started = Event.objects.filter(item=lost_item, type=EventType.ITEM_STARTED).count()
    other_task = make_task(1, prefix="OTHER")  # its worker dies holding the lease: only the sweep moves it on
    other_item = other_task.items.get()
    [killed] = workers.start(1)
    wait_for(lambda: Item.objects.get(pk=other_item.pk).status == ItemStatus.RUNNING, timeout=60,
             message="the other task's item to be leased")
    workers.kill(killed)
    os.kill(spare.pid, signal.SIGCONT)
    wait_for(lambda: Event.objects.filter(item=lost_item, type=EventType.ITEM_STARTED).count() > started,
             timeout=60, message="the cut worker's item to run again")
    rerun = time.monotonic() - cut[0]
    cut_at = time.time() - rerun
    timeline = [(round(e.timestamp.timestamp() - cut_at, 2), e.type, e.actor) for e in
                Event.objects.filter(item=lost_item).order_by("id")]
    assert rerun < settings.LEASE_SECONDS + 5, "\n".join(map(str, [rerun, *timeline])) + workers.logs()
    wait_for(lambda: Task.objects.get(pk=other_task.pk).status == TaskStatus.COMPLETED, timeout=60,
             message="the other task to finish while the link is cut")
    wait_for(lambda: Task.objects.get(pk=lost_task.pk).status == TaskStatus.COMPLETED, timeout=60,
             message="the cut worker's task to finish")
    assert proxy.counts["heal"] == 0, "the cut worker's link stayed half-open throughout"
    delivered_once(lost_task, sandbox)
    delivered_once(other_task, sandbox)
