"""The kill test's slow-worker faults and their checkers: each check shown able to fail."""

import datetime as dt
import io
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from ledger.models import Effect, EffectState, EffectTransition
from ops.killtest.checks import check_late_writes
from ops.killtest.report import Report
from ops.killtest.run import run_killtest

pytestmark = pytest.mark.django_db(transaction=True)


class Deliveries:
    """What the sandbox's client answers for `deliveries()`: the checker's input, written by the test."""

    def __init__(self, rows):
        self.rows = rows

    def deliveries(self, limit=None, **filters):
        return self.rows


def _effect(task: str, key: str, marks: list[tuple[str, str, dt.datetime]]) -> Effect:
    effect = Effect.objects.create(idempotency_key=key, slot=key, action="notify_customer", effect_class="once",
                                   channel="helpdesk", owner_task=task, owner_item="1", owner_step="notify_customer",
                                   payload={}, payload_hash="h", intent_at=timezone.now())
    for to_state, event, at in marks:
        row = EffectTransition.objects.create(effect=effect, event=event, to_state=to_state)
        EffectTransition.objects.filter(pk=row.pk).update(at=at)
    return effect


class TestLateWriteChecker:
    def test_a_delivery_after_a_not_found_look_up_is_a_problem_and_one_after_the_ledger_settled_is_counted(self):
        t0 = timezone.now()
        at = [t0 + dt.timedelta(seconds=s) for s in range(10)]
        _effect("90", "k-good", [(EffectState.INTENT, "EFFECT_INTENT", at[0]),
                                 (EffectState.COMMITTED, "EFFECT_COMMITTED", at[2])])
        _effect("90", "k-stale", [(EffectState.INTENT, "EFFECT_INTENT", at[0]),
                                  (EffectState.UNKNOWN, "EFFECT_RECOVERED", at[2]),
                                  (EffectState.FAILED, "EFFECT_RECONCILED", at[3]),
                                  (EffectState.INTENT, "EFFECT_RETRY", at[5]),
                                  (EffectState.COMMITTED, "EFFECT_COMMITTED", at[7])])
        _effect("90", "k-early", [(EffectState.INTENT, "EFFECT_INTENT", at[0]),
                                  (EffectState.UNKNOWN, "EFFECT_RECOVERED", at[2]),
                                  (EffectState.FAILED, "EFFECT_RECONCILED", at[3])])

        def landed(i, key, s):
            return {"id": f"dlv-{i}", "key": key, "created_at": (t0 + dt.timedelta(seconds=s)).isoformat()}

        report = Report()
        check_late_writes([90], Deliveries([
            landed(1, "k-good", 1.5),  # in time
            landed(2, "k-stale", 6.0),  # the retry's own write
            landed(3, "k-stale", 8.5),  # a woken worker, after the retry committed: late, after settled
            landed(4, "k-early", 4.0),  # after "not found": the look-up was trusted too early
        ]), report)
        assert report.late_writes == 3  # dlv-2, 3, 4 all landed after their effect was unknown
        assert report.after_settled == 2 and report.landed_after_not_found == 1
        assert report.problems == ["delivery dlv-4 with key k-early landed after a look-up said it had not happened"]
        assert report.per_task["90"] == {"late": 3, "after settled": 2, "after not found": 1}

    def test_a_receiver_time_to_the_second_is_not_taken_for_after_a_not_found(self):
        t0 = timezone.now().replace(microsecond=0)
        _effect("92", "k-retried", [(EffectState.UNKNOWN, "EFFECT_RECOVERED", t0 - dt.timedelta(seconds=3)),
                                    (EffectState.FAILED, "EFFECT_RECONCILED", t0 - dt.timedelta(seconds=1)),
                                    (EffectState.INTENT, "EFFECT_RETRY", t0 + dt.timedelta(seconds=0.4))])
        # RT says "second t0": the retry's own write, 0.6 s after the retry, looks like one before it
        rows = Deliveries([{"id": "txn-1", "key": "k-retried", "created_at": t0.isoformat()}])
        exact, coarse = Report(), Report()
        check_late_writes([92], rows, exact)
        check_late_writes([92], rows, coarse, resolution=1.0)
        assert exact.landed_after_not_found == 1  # taken at its word, the time says "after not found"
        assert (coarse.landed_after_not_found, coarse.after_settled, coarse.problems) == (0, 0, [])
        assert coarse.late_writes == 1

    def test_nothing_late_nothing_counted(self):
        t0 = timezone.now()
        _effect("91", "k-1", [(EffectState.INTENT, "EFFECT_INTENT", t0),
                              (EffectState.COMMITTED, "EFFECT_COMMITTED", t0 + dt.timedelta(seconds=2))])
        report = Report()
        check_late_writes([91], Deliveries([{"id": "dlv-1", "key": "k-1", "created_at":
                                             (t0 + dt.timedelta(seconds=1)).isoformat()}]), report)
        assert (report.late_writes, report.after_settled, report.landed_after_not_found, report.problems) == \
               (0, 0, 0, [])


class TestPerFault:
    def test_duplicates_and_lost_items_are_told_per_round_fault(self):
        report = Report(round_faults={5: "pause-aimed", 6: "gateway", 7: "pause-aimed"})
        report.duplicate_keys = {"a": ("5", 1), "b": ("7", 2), "c": ("6", 1)}
        report.count(6, "lost", 2)
        found = report.per_fault()
        assert found["pause-aimed"]["rounds"] == 2 and found["pause-aimed"]["duplicates"] == 3
        assert found["gateway"]["duplicates"] == 1 and found["gateway"]["lost"] == 2
        assert "round fault pause-aimed" in report.table()


@pytest.mark.slow
def test_the_harness_finds_the_double_call_of_a_worker_that_calls_without_checking_its_lease(queue):
    """A worker paused at the statement that commits an intent wakes up after
    the sweep took its item over and a look-up said "not found"; if it calls
    without checking its lease, the receiver that ignores keys gets the
    effect twice, and the harness must say so, under that round's fault. (The
    pause outlasts the settle time -- the lease, the longest call, the
    in-flight bound and the margin: a worker that calls sooner has its late
    write found by the look-up, unchecked or not.)"""
    worker = [sys.executable, "-m", "tests.killtest.broken_worker", "unchecked-lease"]
    tables = []
    for seed in (1, 2, 3):  # the aim may hit a draft (overwrite: no duplicate by design): up to three tries
        report = run_killtest(rounds=1, items=6, workers=2, seed=seed, sandbox_keys="ignore", crash_probability=0.0,
                              kill_every=(1e6, 1e6), round_timeout=90, faults={"pause-aimed"}, fault_seconds=25,
                              worker_command=worker, out=io.StringIO())
        tables.append(report.table())
        if report.duplicates:
            break
    assert report.duplicates >= 1, "\n".join(tables)
    assert report.per_fault()["pause-aimed"]["duplicates"] == report.duplicates
    assert report.after_settled + report.landed_after_not_found >= 1
    assert "FAIL" in tables[-1]


def test_unknown_faults_and_a_fault_shorter_than_the_lease_are_refused():
    with pytest.raises(CommandError, match="unknown fault.*sleep.*use redis, postgres, pause"):
        call_command("killtest", "--faults", "pause,sleep")
    with pytest.raises(CommandError, match="must outlast the lease"):
        call_command("killtest", "--faults", "pause", "--fault-seconds", "1")
    with pytest.raises(CommandError, match="between 0 and 1"):
        call_command("killtest", "--faults", "gateway", "--gateway-share", "2")


@pytest.mark.slow
def test_a_short_run_with_the_aimed_faults_and_the_gateway_passes_on_the_product(queue):
    """The same faults against the product's own workers: a worker paused or
    stalled at its intent's statement wakes up and calls nothing, a gateway's
    late delivery is found before a retry; the receiver ignores keys."""
    report = run_killtest(rounds=3, items=4, workers=3, seed=11, sandbox_keys="ignore",
                          faults={"pause-aimed", "stall-aimed", "gateway"}, fault_seconds=8, round_timeout=240,
                          out=io.StringIO())
    assert report.ok, report.table()
    assert report.duplicates == 0 and report.landed_after_not_found == 0, report.table()
