"""The model API stops answering for a minute in the middle of a batch, under real worker processes.

What must hold: no item fails and nothing is suspended for it, the task page
says "waiting for the model API since …" meanwhile, the endpoint is probed
with a bounded back-off (not hammered by every worker), and the work goes on
by itself after the recovery, within the probe's longest pause.
"""

import os
import time

import pytest
from django.urls import reverse

from ticketagent.models import Event, EventType, ItemStatus, Task, TaskStatus

from ..conftest import child_settings, wait_for
from ..factories import make_task

pytestmark = pytest.mark.slow

OUTAGE_SECONDS = float(os.environ.get("MODEL_OUTAGE_SECONDS", "60"))
PROBE_MAX_SECONDS = 5.0  # the workers' MODEL_PROBE_MAX_SECONDS
RECOVERED_WITHIN = 10.0  # what the product promises after an outage: the probe's pause and one turn more


def test_an_outage_of_the_model_api_waits_and_the_batch_goes_on_by_itself(openai_server, workers, sandbox, client,
                                                                          alice):
    openai_server.keep_requests = True
    openai_server.latency = 0.3  # a model of some speed: the batch is mid-way when the outage starts
    try:
        outage(openai_server, workers, sandbox, client, alice)
    finally:
        openai_server.latency = 0.0


def outage(openai_server, workers, sandbox, client, alice):
    task = make_task(16)
    env = {**openai_server.worker_env, **child_settings(MODEL_PROBE_MAX_SECONDS=PROBE_MAX_SECONDS)}
    workers.start(2, extra_env=env)
    workers.start_recovery()

    def done() -> int:
        return task.items.filter(status=ItemStatus.DONE).count()

    wait_for(lambda: done() >= 3, timeout=120, interval=0.2, message="three items done before the outage")
    openai_server.configure(mode="503")  # every call refused, as a dead gateway in front of the API answers
    outage_began = time.monotonic()

    client.force_login(alice)
    page = reverse("task-detail", args=[task.pk])
    wait_for(lambda: "Waiting for the model API since" in client.get(page).content.decode(), timeout=30,
             interval=0.5, message="the task page to show the wait")
    time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - outage_began)))
    task.refresh_from_db()
    assert task.status == TaskStatus.RUNNING and task.consecutive_failures == 0, task.status_reason
    assert not [r for r in openai_server.requests if r["at"] > outage_began + 1 and r["behaviour"] != "503"]

    openai_server.configure(mode="valid")
    recovered = time.monotonic()
    wait_for(lambda: task.items.filter(status=ItemStatus.DONE).count() == 16, timeout=240, interval=0.5,
             message=lambda: f"the batch to finish by itself\n{workers.logs()}")
    # the task closes once its last item's end has committed: a moment after the last item reads done
    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.COMPLETED, timeout=30,
             message=lambda: f"the task to close after its last item\n{workers.logs()}")
    assert not Event.objects.filter(task=task, type__in=(EventType.ITEM_FAILED, EventType.SUSPENDED)).exists()
    assert "Waiting for the model API" not in client.get(page).content.decode()

    requests = list(openai_server.requests)
    refused = [r["at"] for r in requests if r["behaviour"] == "503"]
    after = [r["at"] for r in requests if r["at"] >= recovered and r["behaviour"] == "valid"]
    assert after, "no call after the recovery"
    print(f"\n  outage {recovered - outage_began:.0f} s: {len(refused)} refused calls; first answered call "
          f"{after[0] - recovered:.1f} s after the recovery")
    assert after[0] - recovered <= RECOVERED_WITHIN, "the work goes on by itself soon after the recovery"
    # probed, not hammered: once the quick retries are spent, calls come one at a time, at most the probe's
    # longest pause apart (plus a turn), and far fewer than two workers retrying freely would send
    settled = [at for at in refused if at - outage_began > 20]
    gaps = [b - a for a, b in zip(settled, settled[1:], strict=False)]
    assert gaps and max(gaps) <= PROBE_MAX_SECONDS + 2, gaps
    assert len(refused) <= 6 + OUTAGE_SECONDS / 1.0, f"{len(refused)} calls in {OUTAGE_SECONDS:.0f} s"
    assert sandbox.counts()["duplicates"] == 0
