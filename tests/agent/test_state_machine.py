"""Random interleavings of step success, model failure, effect outcomes,
crashes and resumes. Whatever happens: no effect is delivered twice, every
item ends done, waiting for a person, or failed with a reason, and
replaying the event log reproduces the checkpoints and the ledger."""

import pytest
from django.utils import timezone
from hypothesis import HealthCheck
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from ledger import faults
from ledger.models import Effect, EffectState
from ledger.services import effect_reconcile, effect_review
from tests.factories import task_replay_diff
from ticketagent.llm.base import ModelError
from ticketagent.llm.offline import OfflineModel
from ticketagent.models import Item, ItemStatus, Task, TaskStatus
from ticketagent.pipeline.run import item_process
from ticketagent.scheduling.recovery import recover_once
from ticketagent.services import ServiceError
from ticketagent.services.resume import task_resume

from ..factories import make_task

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ENDPOINTS = ["draft", "notify", "status", "escalate", "close"]


class FlakyModel(OfflineModel):
    def __init__(self):
        self.fail_next = 0

    def _maybe_fail(self):
        if self.fail_next:
            self.fail_next -= 1
            raise ModelError("server", "the model API failed (HTTP 503)")

    def triage(self, ticket, **kwargs):
        self._maybe_fail()
        return super().triage(ticket, **kwargs)

    def draft(self, ticket, triage, tools, **kwargs):
        self._maybe_fail()
        return super().draft(ticket, triage, tools, **kwargs)

    def decide(self, ticket, triage, reply, **kwargs):
        self._maybe_fail()
        return super().decide(ticket, triage, reply, **kwargs)


def machine_for(sandbox):
    class Interleavings(RuleBasedStateMachine):
        @initialize(n=st.integers(1, 3), auto_close=st.booleans(),
                    subject=st.sampled_from(["Refund please", "Thanks a lot", "Site is down, urgent"]))
        def setup(self, n, auto_close, subject):
            sandbox.reset()
            sandbox.set_faults(honor_keys=False)  # the hard case: only the ledger stands between us and duplicates
            self.model = FlakyModel()
            self.task = make_task(n, subject=subject, allow_auto_close=auto_close, failure_threshold=2)

        def items(self):
            return list(Item.objects.filter(task=self.task).order_by("row"))

        @rule(index=st.integers(0, 2), crash=st.sampled_from([None, *faults.WINDOWS]))
        def run_item(self, index, crash):
            items = self.items()
            item = items[index % len(items)]
            if crash:
                faults.arm(crash)
            try:
                item_process(item_id=item.pk, attempt=item.attempt, model=self.model)
            except faults.SimulatedCrash:
                pass
            finally:
                faults.disarm()

        @rule(times=st.integers(1, 3))
        def model_fails(self, times):
            self.model.fail_next = times

        @rule(endpoint=st.sampled_from(ENDPOINTS), kind=st.sampled_from(["error_next", "drop_next"]),
              status=st.sampled_from([422, 503]))
        def channel_fault(self, endpoint, kind, status):
            sandbox.set_faults(**{kind: {endpoint: 1}}, error_status=status)

        @rule()
        def crashed_workers_are_recovered(self):
            Item.objects.filter(task=self.task, status=ItemStatus.RUNNING).update(
                lease_expires_at=timezone.now() - timezone.timedelta(seconds=1))
            recover_once()

        @rule()
        def reconcile(self):
            for effect in Effect.objects.filter(owner_task=str(self.task.pk), state=EffectState.UNKNOWN):
                effect_reconcile(effect_id=effect.pk)

        @rule(decision=st.sampled_from(["truth", "skip"]))
        def review(self, decision):
            effect = Effect.objects.filter(owner_task=str(self.task.pk), state=EffectState.UNKNOWN).first()
            if effect is None:
                return
            if decision == "truth":  # the operator checked the helpdesk
                happened = bool(sandbox.deliveries(key=effect.idempotency_key))
                decision = "happened" if happened else "not_happened"
            effect_review(effect_id=effect.pk, verdict=decision, reason="checked", actor="tester")

        @rule()
        def resume(self):
            try:
                task_resume(task_id=self.task.pk, actor="tester")
            except ServiceError:
                pass

        @invariant()
        def nothing_is_delivered_twice(self):
            if not hasattr(self, "task"):
                return
            counts = sandbox.counts()["by_key"]
            assert all(n == 1 for n in counts.values()), counts
            committed = Effect.objects.filter(owner_task=str(self.task.pk), state=EffectState.COMMITTED)
            for key in committed.values_list("idempotency_key", flat=True):
                assert counts.get(key) == 1, f"committed effect {key[:8]} was never delivered"

        def teardown(self):
            if not hasattr(self, "task"):
                return
            self.drive_to_an_end()
            for item in self.items():
                assert item.status in (ItemStatus.DONE, ItemStatus.WAITING_REVIEW, ItemStatus.WAITING_APPROVAL,
                                       ItemStatus.FAILED, ItemStatus.SKIPPED), item.status
                if item.status == ItemStatus.FAILED:
                    assert item.last_error and item.failure_kind
            self.nothing_is_delivered_twice()
            assert task_replay_diff(self.task.pk) == []

        def drive_to_an_end(self):
            """Clear faults and act as the operators and the sweep would."""
            sandbox.clear_faults()
            sandbox.set_faults(honor_keys=False)
            self.model.fail_next = 0
            for _ in range(12):
                self.crashed_workers_are_recovered()
                self.reconcile()
                self.review("truth")
                self.resume()
                for item in self.items():
                    if item.status == ItemStatus.QUEUED:
                        item_process(item_id=item.pk, attempt=item.attempt, model=self.model)
                task = Task.objects.get(pk=self.task.pk)
                if task.status == TaskStatus.COMPLETED:
                    return
            # whatever is left must be waiting for a person or failed with a reason

    return Interleavings


def test_random_interleavings_never_deliver_twice_and_replay_matches(sandbox, queue):
    machine = machine_for(sandbox)
    run_state_machine_as_test(machine, settings=hsettings(
        max_examples=50, stateful_step_count=20, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]))
