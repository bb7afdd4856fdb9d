"""When the gate's INSERT meets another process's uncommitted intent for the
same key or slot, it waits: if that intent commits, the INSERT is refused
and the general path finds the committed row (a duplicate or a conflict,
no call); if it rolls back, the INSERT goes through and the effect runs.
A refusal for which the ledger holds no row is raised, never hidden.

This is why the general path has no second INSERT (docs/testing.md): by the
time it runs, the row that caused the refusal is committed and visible.
"""

import json
import subprocess
import sys

import pytest
from django.db import IntegrityError, connection

from ledger import gate
from ledger.models import BlockedDuplicate, Effect, EffectState, EffectTransition

from ..conftest import ROOT, wait_for
from .helpers import NOTIFY, run_notify

pytestmark = pytest.mark.django_db(transaction=True)

# Phase 1 of a real effect_run that stops inside its transaction, right
# after its INSERT, until told "commit" or "rollback" on stdin.
HOLDER = """
import json, sys, django
django.setup()
from tests.gate_run import effect_run
from ledger.signals import effect_changed

def hold(sender, event, **kwargs):
    if event == "EFFECT_INTENT":
        print("holding", flush=True)
        if sys.stdin.readline().strip() == "rollback":
            raise SystemExit(3)

effect_changed.connect(hold)
r = effect_run(action="notify_customer", owner_task="t1", owner_item="i1", owner_step="notify_customer",
               claim_token="holder", payload=json.loads(sys.argv[1]))
print(json.dumps({"called": r.called, "blocked": r.blocked, "state": r.state}), flush=True)
"""

RACER = """
import json, sys, django
django.setup()
from tests.gate_run import effect_run
print("inserting", flush=True)
r = effect_run(action="notify_customer", owner_task="t1", owner_item="i1", owner_step="notify_customer",
               claim_token="racer", payload=json.loads(sys.argv[1]))
print(json.dumps({"called": r.called, "blocked": r.blocked, "state": r.state}), flush=True)
"""

REGENERATED = {**NOTIFY, "body": {**NOTIFY["body"], "body": "A regenerated, different draft."}}


def spawn(script, payload, env, **kwargs):
    return subprocess.Popen([sys.executable, "-c", script, json.dumps(payload)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def result(proc) -> dict:
    """What effect_run returned in that process: called, blocked (the state
    a blocked racer saw depends on how far the holder's call had gone)."""
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    answer = json.loads(out.strip().splitlines()[-1])
    return {"called": answer["called"], "blocked": answer["blocked"]}


def _inserts_waiting_on_a_lock() -> int:
    """Sessions of this database whose INSERT into the effects table waits for a lock (the holder's row)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND wait_event_type = 'Lock' AND query LIKE %s", [f'%INSERT INTO "{Effect._meta.db_table}"%'])
        return cursor.fetchone()[0]


def race_a_held_intent(env, racer_payload, verdict):
    """The holder's intent is inserted, not committed; the racer's INSERT
    meets it and must wait; then the holder commits or rolls back."""
    holder = spawn(HOLDER, NOTIFY, env, stdin=subprocess.PIPE)
    racer = None
    try:
        assert holder.stdout.readline().strip() == "holding", holder.stderr.read()
        racer = spawn(RACER, racer_payload, env)
        assert racer.stdout.readline().strip() == "inserting", racer.stderr.read()
        wait_for(lambda: racer.poll() is not None or _inserts_waiting_on_a_lock(), timeout=30,
                 message="the racer's INSERT to reach PostgreSQL")
        assert racer.poll() is None and _inserts_waiting_on_a_lock() == 1, \
            "the racer's INSERT waits on the holder's uncommitted row"
    except BaseException:
        for proc in (holder, racer):  # a holder left waiting would hold its row lock past the test
            if proc is not None:
                proc.kill()
                proc.communicate()
        raise
    holder.stdin.write(f"{verdict}\n")
    holder.stdin.flush()
    return holder, racer


@pytest.mark.slow
class TestAnInsertMeetingAnUncommittedIntent:
    def test_is_refused_once_it_commits_and_blocked_as_a_duplicate(self, workers, sandbox):
        holder, racer = race_a_held_intent(workers.env, NOTIFY, "commit")
        assert result(holder) == {"called": True, "blocked": ""}
        assert result(racer) == {"called": False, "blocked": "duplicate"}
        effect = Effect.objects.get()
        assert (effect.state, effect.claim_token) == (EffectState.COMMITTED, "holder")
        assert list(BlockedDuplicate.objects.values_list("kind", "claim_token")) == [("duplicate", "racer")]
        assert sandbox.counts()["by_key"] == {effect.idempotency_key: 1}

    def test_is_refused_once_it_commits_and_blocked_as_a_conflict(self, workers, sandbox):
        holder, racer = race_a_held_intent(workers.env, REGENERATED, "commit")
        assert result(holder) == {"called": True, "blocked": ""}
        assert result(racer) == {"called": False, "blocked": "conflict"}
        effect = Effect.objects.get()
        assert (effect.state, effect.claim_token) == (EffectState.COMMITTED, "holder")
        assert list(BlockedDuplicate.objects.values_list("kind", "claim_token")) == [("conflict", "racer")]
        assert sandbox.counts()["by_key"] == {effect.idempotency_key: 1}

    def test_goes_through_when_it_rolls_back(self, workers, sandbox):
        holder, racer = race_a_held_intent(workers.env, REGENERATED, "rollback")
        holder.communicate(timeout=60)
        assert holder.returncode == 3
        assert result(racer) == {"called": True, "blocked": ""}
        effect = Effect.objects.get()
        assert (effect.state, effect.claim_token, effect.payload) == (EffectState.COMMITTED, "racer", REGENERATED)
        assert BlockedDuplicate.objects.count() == 0
        assert sandbox.counts()["by_key"] == {effect.idempotency_key: 1}


class TestARefusalWithNoRowToShow:
    @pytest.mark.parametrize("action", ["notify_customer", "save_draft"], ids=["slotted", "no-slot"])
    def test_is_raised_and_nothing_is_attempted(self, sandbox, monkeypatch, action):
        def refused(intent, now):
            return None  # ON CONFLICT DO NOTHING inserted nothing, as for a constraint the gate does not know

        monkeypatch.setattr(gate, "insert_intent", refused)
        with pytest.raises(IntegrityError, match="holds no row with its key or slot"):
            run_notify(action=action, step=action)
        assert Effect.objects.count() == 0 and EffectTransition.objects.count() == 0
        assert BlockedDuplicate.objects.count() == 0
        assert sandbox.counts()["requests"] == 0
