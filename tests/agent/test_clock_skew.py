"""Workers whose host clock is off by ±30 s (libfaketime in the worker process).

Leases and settle times are written and compared on PostgreSQL's clock, so
a skewed worker's live lease is never taken over and no "not found" is
trusted before the old holder could have stopped calling.
"""

import datetime as dt
import time
from pathlib import Path

import pytest

from ledger.models import Effect, EffectState, EffectTransition
from ticketagent.models import Event, EventType, Task, TaskStatus

from ..conftest import skip_or_fail, wait_for
from ..factories import make_task
from .test_stalled_database import delivered_once

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LIBFAKETIME = [Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"),
               Path("/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"),
               Path("/usr/lib/faketime/libfaketime.so.1")]


def skewed(offset: str) -> dict:
    """The environment of a worker process whose wall clock is `offset` off (e.g. "-30s")."""
    lib = next((p for p in LIBFAKETIME if p.exists()), None)
    if lib is None:
        skip_or_fail("libfaketime is not installed (apt-get install faketime)")
    return {"LD_PRELOAD": str(lib), "FAKETIME": offset, "DONT_FAKE_MONOTONIC": "1"}


def test_no_live_lease_of_a_skewed_worker_is_taken_over(workers, sandbox):
    sandbox.set_faults(honor_keys=False, latency_ms=300)
    task = make_task(6)
    workers.start(1, extra_env=skewed("-30s"))
    workers.start(1, extra_env=skewed("+30s"))
    workers.start_recovery()
    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.COMPLETED, timeout=120,
             message="the task to finish", interval=0.5)
    assert not Event.objects.filter(task=task, type=EventType.RECOVERED).exists(), workers.logs()
    # the skew was real: the workers' own rows carry their clocks
    now = time.time()
    offsets = {round((e.timestamp.timestamp() - now) / 30) for e in Event.objects.filter(task=task,
                                                                               type=EventType.ITEM_STARTED)}
    assert offsets & {-1, 1}, offsets
    delivered_once(task, sandbox)


def test_no_not_found_is_trusted_early_for_a_slow_clocked_worker(workers, sandbox):
    """A worker 30 s behind is killed inside a call: its intent's own time
    says it is long over, but the settle time counts from its lease deadline
    on the database's clock."""
    sandbox.set_faults(honor_keys=False, latency_ms=1000)
    task = make_task(1)
    item = task.items.get()
    [victim] = workers.start(1, extra_env=skewed("-30s"))
    wait_for(lambda: Effect.objects.filter(owner_item=str(item.pk), state=EffectState.INTENT).exists(),
             timeout=60, message="the worker to be inside an effect call", interval=0.05)
    seen = dt.datetime.now(dt.UTC)
    workers.kill(victim)
    sandbox.clear_faults()
    sandbox.set_faults(honor_keys=False)
    workers.start_recovery()
    workers.start(1)
    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.COMPLETED, timeout=90,
             message="the task to finish")
    reconciled = EffectTransition.objects.filter(effect__owner_item=str(item.pk), event="EFFECT_RECONCILED")
    assert reconciled.exists(), workers.logs()
    from django.conf import settings

    earliest = seen + dt.timedelta(seconds=settings.HELPDESK_CONNECT_TIMEOUT + settings.HELPDESK_READ_TIMEOUT)
    for transition in reconciled:
        assert transition.at >= earliest, (transition.at, earliest)
    delivered_once(task, sandbox)
