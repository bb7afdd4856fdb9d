"""The helpdesk stops answering in the middle of a batch, under real worker processes and the sandbox helpdesk.

What must hold: no item fails and nothing is suspended for it, the task page says "waiting for the helpdesk
since …" meanwhile, the helpdesk is probed (not written to by every worker), and once it answers again the batch
finishes by itself with every delivery made once. A hiccup on the reads before a retried write (the probe, the
look-up before the retry) needs nobody either. Only a definite refusal fails an item: a 404 (no such ticket) or a
403 (a missing right) is `helpdesk_refused`, and three of them suspend the task as before.
"""

import time

import pytest
from django.urls import reverse

from ledger.models import Effect, EffectState
from ticketagent.models import Event, EventType, Item, ItemStatus, Task, TaskStatus

from ..conftest import child_settings, wait_for
from ..factories import make_task

pytestmark = pytest.mark.slow

OUTAGE_SECONDS = 15.0
# short waits: a call waits 4 s for the helpdesk, then its item goes back to the queue (and waits again there)
WAITING = child_settings(CHANNEL_PROBE_MAX_SECONDS=2.0, CHANNEL_WAIT_SECONDS=4.0)


def delivered_once(sandbox, task: Task) -> None:
    """Every committed effect of the task was delivered exactly once, and nothing else was."""
    counts = sandbox.counts()
    committed = set(Effect.objects.filter(owner_task=str(task.pk), state=EffectState.COMMITTED)
                    .values_list("idempotency_key", flat=True))
    assert counts["duplicates"] == 0, counts["by_key"]
    assert set(counts["by_key"]) == committed and all(n == 1 for n in counts["by_key"].values())


def no_failure(task: Task) -> None:
    assert not Event.objects.filter(task=task, type__in=(EventType.ITEM_FAILED, EventType.SUSPENDED)).exists(), \
        list(Event.objects.filter(task=task, type__in=(EventType.ITEM_FAILED, EventType.SUSPENDED))
             .values_list("payload", flat=True))


def test_a_helpdesk_answering_503_to_everything_makes_the_task_wait_and_go_on_by_itself(workers, sandbox, client,
                                                                                       alice):
    task = make_task(16, failure_threshold=3)
    sandbox.set_faults(latency_ms=200)  # a helpdesk of some speed: the batch is mid-way when the outage starts
    workers.start(2, extra_env=WAITING)
    workers.start_recovery()
    wait_for(lambda: task.items.filter(status=ItemStatus.DONE).count() >= 2, timeout=120, interval=0.2,
             message=lambda: f"two items done before the outage\n{workers.logs()}")

    sandbox.set_faults(error_rate={"*": 1.0}, read_error_rate=1.0, error_status=503)  # writes, look-ups, probes
    writes_before = sandbox.counts()["requests"]
    outage_began = time.monotonic()
    client.force_login(alice)
    page = reverse("task-detail", args=[task.pk])
    wait_for(lambda: "Waiting for the helpdesk since" in client.get(page).content.decode(), timeout=30,
             interval=0.5, message=lambda: f"the task page to show the wait\n{workers.logs()}")
    time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - outage_began)))
    task.refresh_from_db()
    assert task.status == TaskStatus.RUNNING and task.consecutive_failures == 0, task.status_reason
    no_failure(task)
    # the calls wait for the probe: only those already on their way when it went down were written
    writes_during = sandbox.counts()["requests"] - writes_before
    assert writes_during <= 4, f"{writes_during} writes sent to a helpdesk that answers 503 to everything"
    requeued = list(Event.objects.filter(task=task, type=EventType.ITEM_REQUEUED).values_list("payload__why",
                                                                                                flat=True))
    assert any("waiting for the helpdesk since" in why for why in requeued), \
        f"a call that waited CHANNEL_WAIT_SECONDS hands its item back: {requeued}\n{workers.logs()}"

    sandbox.set_faults(error_rate={"*": 0}, read_error_rate=0, latency_ms=0)
    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.COMPLETED, timeout=240, interval=0.5,
             message=lambda: f"the batch to finish by itself\n{workers.logs()}")
    assert task.items.filter(status=ItemStatus.DONE).count() == 16
    no_failure(task)
    assert "Waiting for the helpdesk" not in client.get(page).content.decode()
    delivered_once(sandbox, task)


def test_a_hiccup_on_the_reads_before_a_retried_write_needs_nobody(workers, sandbox):
    """The helpdesk answers a write 429 (not processed): the item waits, the helpdesk is probed, and the retry
    looks its key up before writing. The probe's and the look-up's reads meet a 503, a dropped connection and a
    stall in turn; the item completes all the same, with one delivery of each effect."""
    sandbox.set_faults(error_next={"notify": 1}, error_status=429, read_error_next=1, read_drop_next=1,
                       read_stall_next=1)
    task = make_task(1, failure_threshold=1)
    assert workers.burst(extra_env=WAITING) == 0, workers.logs()
    item = Item.objects.get(task=task)
    assert item.status == ItemStatus.DONE, (item.status, item.last_error, workers.logs())
    assert item.attempt >= 2, "the item was handed back, not failed"
    no_failure(task)
    counts = sandbox.counts()
    assert (counts["errors_injected"], counts["drops"], counts["stalls"]) == (2, 1, 1), counts
    delivered_once(sandbox, task)
    notify = Effect.objects.get(owner_task=str(task.pk), action="notify_customer")
    assert notify.attempts >= 2  # sent again with the same key, after the 429 and the waits


@pytest.mark.parametrize("status", [404, 403])
def test_only_a_definite_refusal_fails_an_item_and_says_so(workers, sandbox, status):
    sandbox.set_faults(error_status=status, error_rate={"draft": 1.0})
    task = make_task(4, failure_threshold=3)
    assert workers.burst() == 0, workers.logs()
    task.refresh_from_db()
    failed = list(task.items.filter(status=ItemStatus.FAILED))
    assert len(failed) == 3 and {i.failure_kind for i in failed} == {"helpdesk_refused"}
    assert all(i.last_error.startswith(f"save_draft: helpdesk refused with {status}") for i in failed)
    assert task.status == TaskStatus.SUSPENDED
    assert task.status_reason == "3 consecutive failures: refused by the helpdesk"
