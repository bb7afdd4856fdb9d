"""Recovery with real processes: SIGKILL, Redis losing everything, and the sweep."""


import pytest
from django.db.models import Count

from ledger.models import Effect, EffectState
from tests.factories import task_replay_diff
from ticketagent.models import Event, EventType, Item, ItemStatus, Task, TaskStatus
from ticketagent.services.tasks import task_cancel

from ..conftest import wait_for
from ..factories import make_task

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def ledger_matches_sandbox(task, sandbox):
    committed = set(Effect.objects.filter(owner_task=str(task.pk), state=EffectState.COMMITTED)
                    .values_list("idempotency_key", flat=True))
    delivered = {}
    for d in sandbox.deliveries():
        delivered[d["key"]] = delivered.get(d["key"], 0) + 1
    assert set(delivered) == committed, _differences(task, set(delivered), committed)
    assert all(n == 1 for n in delivered.values()), delivered


def _differences(task, delivered: set, committed: set) -> str:
    """The effects behind the keys the helpdesk and the ledger disagree on, and what the ledger says of them."""
    lines = []
    for side, keys in (("delivered, not committed", delivered - committed),
                       ("committed, not delivered", committed - delivered)):
        for key in sorted(keys):
            effect = Effect.objects.filter(idempotency_key=key).first()
            lines.append(f"{side}: {key} " + (f"effect {effect.pk} {effect.action} of item {effect.owner_item} "
                                             f"(task {effect.owner_task}): {effect.state}, attempts "
                                             f"{effect.attempts}, {effect.last_error or effect.last_reconcile}"
                                             if effect else "no effect in the ledger"))
    return "\n".join(lines)


def test_a_sigkilled_worker_s_item_completes_elsewhere(workers, sandbox):
    """Taken over and finished by another worker (how soon is the bench's figure 5, not a test's)."""
    sandbox.set_faults(latency_ms=1500, honor_keys=False)
    task = make_task(1)
    item = task.items.get()
    [victim] = workers.start(1)
    wait_for(lambda: Effect.objects.filter(owner_item=str(item.pk), state=EffectState.INTENT).exists(),
             timeout=30, message="the worker to be inside an effect call")
    workers.kill(victim)
    sandbox.clear_faults()
    sandbox.set_faults(honor_keys=False)
    workers.start(1)
    workers.start_recovery()
    wait_for(lambda: Item.objects.get(pk=item.pk).status == ItemStatus.DONE, timeout=20,
             message="the item to be done elsewhere")
    assert Event.objects.filter(item=item, type=EventType.RECOVERED).exists()
    ledger_matches_sandbox(task, sandbox)
    assert task_replay_diff(task.pk) == []


def test_an_orphaned_work_horse_keeps_its_lease_and_nothing_runs_twice(workers, sandbox):
    """SIGKILL on the parent worker only: rq's work-horse runs on as an orphan
    and rq may hand the job to another worker. The lease (kept alive by the
    orphan's heartbeat) admits only one of them. (Workers that fork: with
    the default, jobs run in the worker process and die with it.)"""
    sandbox.set_faults(latency_ms=800, honor_keys=False)
    task = make_task(1)
    item = task.items.get()
    [victim] = workers.start(1, extra_env={"WORKER_FORK": "true"})
    wait_for(lambda: Effect.objects.filter(owner_item=str(item.pk)).exists(), timeout=30,
             message="the worker to reach the effects")
    workers.kill(victim, horse=False)
    assert workers.orphans(), "the work-horse runs on without its parent"
    workers.start(1)
    workers.start_recovery()
    from ticketagent.scheduling import jobs

    jobs.get_queue().enqueue(jobs.JOB_FUNCTION, item.pk, item.attempt, job_id=f"item-{item.pk}-rerun")
    wait_for(lambda: Item.objects.get(pk=item.pk).status == ItemStatus.DONE, timeout=30, message="the item")
    assert Event.objects.filter(item=item, type=EventType.ITEM_STARTED).count() == 1
    ledger_matches_sandbox(task, sandbox)


def test_redis_emptied_mid_task_loses_nothing_and_runs_nothing_twice(workers, sandbox, redis_conn):
    """Redis restarted empty (its queue, the workers' registry, the counters): FLUSHDB of the database the
    product uses -- all it has in Redis (a FLUSHALL would also empty the other test processes' databases)."""
    sandbox.set_faults(latency_ms=60)
    task = make_task(20)
    workers.start(1)
    wait_for(lambda: Item.objects.filter(task=task, status=ItemStatus.DONE).count() >= 3, timeout=60,
             message="a few items to finish")
    redis_conn.flushdb()
    workers.start_recovery()
    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.COMPLETED, timeout=90,
             message="the task to complete after Redis was emptied")
    assert task.items.filter(status=ItemStatus.DONE).count() == 20
    started = dict(Event.objects.filter(task=task, type=EventType.ITEM_DONE).values_list("item_id")
                   .annotate(n=Count("id")).values_list("item_id", "n"))
    assert len(started) == 20 and set(started.values()) == {1}, "every item finished exactly once"
    ledger_matches_sandbox(task, sandbox)
    assert sandbox.counts()["duplicates"] == 0
    assert task_replay_diff(task.pk) == []



def test_an_item_of_a_cancelled_task_whose_worker_died_ends_skipped(workers, sandbox):
    """The worker died inside a call, then the task was cancelled: the sweep takes the item over and ends it as
    its worker would have at its next step -- skipped -- instead of queueing it for a task that never runs again."""
    sandbox.set_faults(latency_ms=1500)
    task = make_task(1)
    item = task.items.get()
    [victim] = workers.start(1)
    wait_for(lambda: Effect.objects.filter(owner_item=str(item.pk), state=EffectState.INTENT).exists(),
             timeout=30, message="the worker to be inside an effect call")
    workers.kill(victim)
    task_cancel(task_id=task.pk, actor="alice")
    assert Item.objects.get(pk=item.pk).status == ItemStatus.RUNNING, "a cancel skips only the queued items"
    workers.start_recovery()
    wait_for(lambda: Event.objects.filter(item=item, type=EventType.RECOVERED).exists(), timeout=30,
             message="the sweep to take the item over")
    item.refresh_from_db()
    assert (item.status, item.last_error, item.lease_token) == (ItemStatus.SKIPPED, "task cancelled", "")
    assert item.finished_at is not None
    assert Event.objects.filter(item=item, type=EventType.ITEM_SKIPPED).count() == 1
    assert not Event.objects.filter(item=item, type=EventType.ITEM_REQUEUED).exists()
    assert Effect.objects.get(owner_item=str(item.pk)).state != EffectState.INTENT, "its intent left for reconcile"
    assert Task.objects.get(pk=task.pk).status == TaskStatus.CANCELLED
