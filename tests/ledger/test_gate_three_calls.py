"""The gate is three calls and the caller owns the transactions: its own checks and writes sit beside
`intent_record` and `outcome_record` in its `transaction.atomic()` and commit with them or not at all;
the call runs with no transaction open; each call refuses the wrong side of a transaction."""

import time

import pytest
from django.db import connection, transaction

from ledger.channels.base import committed
from ledger.gate import TransactionMisuse, effect_perform, intent_prepare, intent_record, outcome_record
from ledger.models import BlockedDuplicate, Effect, EffectState, EffectTransition

from .helpers import NOTIFY, run_notify

pytestmark = pytest.mark.django_db(transaction=True)


class LeaseGone(Exception):
    """The caller's own check beside the gate's call: its claim is gone."""


def notify(payload=None, *, token="worker-a"):
    return intent_prepare(action="notify_customer", payload=payload or NOTIFY, owner_task="t1", owner_item="i1",
                          owner_step="notify_customer", claim_token=token)


def received(sandbox) -> tuple[int, int]:
    """(write requests, deliveries) the sandbox helpdesk has seen."""
    counts = sandbox.counts()
    return counts["requests"], counts["deliveries"]


def record_then_lose(intent):
    """The caller's transaction: the intent, then its own check, which fails."""
    with transaction.atomic():
        intent_record(intent)
        raise LeaseGone("lease taken over")


class TestEachCallKeepsItsSideOfTheTransaction:
    def test_the_intent_and_the_outcome_need_the_callers_transaction(self, sandbox):
        intent = notify()
        with pytest.raises(TransactionMisuse, match="inside the caller's transaction"):
            intent_record(intent)
        with transaction.atomic():
            effect = intent_record(intent).effect
        with pytest.raises(TransactionMisuse, match="inside the caller's transaction"):
            outcome_record(intent, effect, committed("ref-1"))
        assert Effect.objects.get().state == EffectState.INTENT

    def test_the_call_refuses_an_open_transaction_and_sends_nothing(self, sandbox):
        intent = notify()
        with transaction.atomic():
            effect = intent_record(intent).effect
            with pytest.raises(TransactionMisuse, match="no transaction open"):
                effect_perform(intent, effect, deadline=time.monotonic() + 60)
        assert received(sandbox) == (0, 0)
        result = effect_perform(intent, effect, deadline=time.monotonic() + 60)
        assert result.state == EffectState.COMMITTED and received(sandbox) == (1, 1)


class TestTheCallersCheckBesideTheIntent:
    def test_failing_leaves_no_row_and_nothing_is_called(self, sandbox):
        with pytest.raises(LeaseGone):
            record_then_lose(notify())
        assert Effect.objects.count() == 0 and EffectTransition.objects.count() == 0
        assert received(sandbox) == (0, 0)
        assert run_notify().state == EffectState.COMMITTED  # the same effect once the check holds

    def test_failing_on_a_retry_leaves_the_failed_row_as_it_was(self, sandbox):
        sandbox.set_faults(error_next={"notify": 1}, error_status=422)
        assert run_notify().state == EffectState.FAILED
        with pytest.raises(LeaseGone):
            record_then_lose(notify(token="worker-b"))
        effect = Effect.objects.get()
        assert (effect.state, effect.attempts, effect.claim_token) == (EffectState.FAILED, 1, "worker-a")
        retry = run_notify(claim_token="worker-b")
        assert retry.called and retry.effect.pk == effect.pk and retry.effect.attempts == 2

    @pytest.mark.parametrize("payload", [NOTIFY, {**NOTIFY, "body": {**NOTIFY["body"], "body": "regenerated"}}],
                             ids=["same-key", "same-slot"])
    def test_failing_at_a_duplicate_or_conflict_counts_nothing_as_blocked(self, sandbox, payload):
        run_notify()
        with pytest.raises(LeaseGone):
            record_then_lose(notify(payload, token="worker-b"))
        assert BlockedDuplicate.objects.count() == 0
        assert received(sandbox) == (1, 1)


class TestTheOutcome:
    def test_commits_with_the_callers_writes_or_not_at_all(self, sandbox):
        intent = notify()
        with transaction.atomic():
            effect = intent_record(intent).effect
        result = effect_perform(intent, effect, deadline=time.monotonic() + 60)
        with pytest.raises(LeaseGone), transaction.atomic():
            assert outcome_record(intent, effect, result)
            raise LeaseGone("the caller's recovery point could not be written")
        row = Effect.objects.get()
        assert row.state == EffectState.INTENT, "rolled back with the caller's write: recovery will settle it"
        assert list(row.transitions.values_list("to_state", flat=True)) == ["intent"]
        with transaction.atomic():
            assert outcome_record(intent, effect, result)
        assert Effect.objects.get().state == EffectState.COMMITTED

    def test_of_a_row_no_longer_this_attempts_writes_nothing_and_says_so(self, sandbox):
        intent = notify()
        with transaction.atomic():
            effect = intent_record(intent).effect
        result = effect_perform(intent, effect, deadline=time.monotonic() + 60)
        Effect.objects.filter(pk=effect.pk).update(claim_token="worker-b")  # taken over meanwhile
        statements = []
        with connection.execute_wrapper(lambda execute, sql, *args: statements.append(sql) or execute(sql, *args)):
            with transaction.atomic():
                assert outcome_record(intent, effect, result) is False
        row = Effect.objects.get()
        assert (row.state, row.external_ref) == (EffectState.INTENT, "")
        assert list(row.transitions.values_list("to_state", flat=True)) == ["intent"]
        assert any("UPDATE" in sql for sql in statements)
