"""Two OS processes racing the same effect, or the same slot with another
payload: exactly one call goes out."""

import json
import subprocess
import sys
import time

import pytest

from ledger.models import BlockedDuplicate, Effect

from ..conftest import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

RACER = """
import json, sys, time, django
django.setup()
from tests.gate_run import effect_run
start = float(sys.argv[1])
while time.time() < start:
    time.sleep(0.001)
r = effect_run(action="notify_customer", owner_task="t1", owner_item="i1", owner_step="notify_customer",
               claim_token=sys.argv[2], payload={"ticket": "T-9", "body": {"to": "ann@example.com", "subject": "s",
               "body": sys.argv[3]}})
print(json.dumps({"called": r.called, "blocked": r.blocked, "state": r.state}))
"""


@pytest.mark.parametrize("honor_keys", [True, False], ids=["keys-honored", "keys-ignored"])
@pytest.mark.parametrize("round_", range(3))
def test_two_processes_racing_make_exactly_one_call(workers, sandbox, honor_keys, round_):
    sandbox.set_faults(honor_keys=honor_keys, latency_ms=200)
    results = race(workers.env, ["b", "b"])
    assert sorted(r["called"] for r in results) == [False, True], results
    assert [r["blocked"] for r in results if not r["called"]] == ["duplicate"]
    assert sandbox.counts()["by_endpoint"]["notify"] == 1
    assert Effect.objects.count() == 1 and BlockedDuplicate.objects.count() == 1


@pytest.mark.parametrize("round_", range(3))
def test_two_processes_racing_for_one_slot_with_different_payloads_make_exactly_one_call(workers, sandbox, round_):
    sandbox.set_faults(latency_ms=200)
    results = race(workers.env, ["one draft", "a regenerated draft"])
    assert sorted(r["called"] for r in results) == [False, True], results
    assert [r["blocked"] for r in results if not r["called"]] == ["conflict"]
    assert sandbox.counts()["by_endpoint"]["notify"] == 1
    assert Effect.objects.count() == 1
    assert list(BlockedDuplicate.objects.values_list("kind", flat=True)) == ["conflict"]


def race(env, bodies):
    """Two processes call effect_run at the same moment, one body each."""
    start = time.time() + 1.5
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(start), f"racer-{n}", body], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n, body in enumerate(bodies)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results
