"""A fence the gate folds into its own statements (`ledger.statements.Fence`): on
PostgreSQL each phase is then one statement in autocommit, and it keeps the
promises of a fence that is a check: nothing is attempted once the claim is
lost at the intent, and an outcome seen after the claim was lost is recorded
(it is the truth) but reported as fenced."""

import pytest
from django.db import connection

from ledger.gate import Fenced
from ledger.models import BlockedDuplicate, Effect, EffectState, EffectTransition
from ledger.statements import Fence
from tests.factories import make_task
from ticketagent.models import Item, ItemStatus
from ticketagent.pipeline.lease import ItemRun, lease_fence

from .helpers import NOTIFY, Statements, run_notify

pytestmark = pytest.mark.django_db(transaction=True)


def leased_item(token="worker-a") -> ItemRun:
    """An item of a real task, leased to `token` (the pipeline's fence is about it)."""
    item = Item.objects.filter(task=make_task(1)).get()
    Item.objects.filter(pk=item.pk).update(status=ItemStatus.RUNNING, lease_token=token, lease_owner="test")
    item.refresh_from_db()
    return ItemRun(item=item, token=token, cursor=0, outputs={})


class TestAFoldedFence:
    def test_that_holds_makes_each_phase_one_statement_without_a_transaction_block(self, sandbox):
        run = leased_item()
        statements = Statements()
        with connection.execute_wrapper(statements):
            result = run_notify(item=str(run.item.pk), fence=lease_fence(run))
        assert (result.called, result.blocked, result.state) == (True, "", EffectState.COMMITTED)
        assert sandbox.counts()["deliveries"] == 1
        assert statements.seen == [("WITH", False), ("WITH", False)]
        effect = Effect.objects.get()
        assert list(effect.transitions.values_list("event", flat=True).order_by("id")) == [
            "EFFECT_INTENT", "EFFECT_COMMITTED"]

    def test_lost_at_the_intent_attempts_nothing_and_leaves_no_row(self, sandbox):
        run = leased_item()
        Item.objects.filter(pk=run.item.pk).update(lease_token="worker-b")  # taken over
        with pytest.raises(Fenced):
            run_notify(item=str(run.item.pk), fence=lease_fence(run))
        assert sandbox.counts()["requests"] == 0
        assert Effect.objects.count() == 0 and EffectTransition.objects.count() == 0

    def test_lost_during_the_call_records_the_outcome_and_says_fenced(self, sandbox):
        run = leased_item()

        class TakenOverDuringTheCall:
            def perform(self, spec, payload, key):
                Item.objects.filter(pk=run.item.pk).update(lease_token="worker-b")
                from ledger.channels.registry import get_channel
                return get_channel(spec.channel).perform(spec, payload, key)

        result = run_notify(item=str(run.item.pk), fence=lease_fence(run), channel=TakenOverDuringTheCall())
        assert (result.called, result.blocked) == (True, "fenced")
        effect = Effect.objects.get()
        assert effect.state == EffectState.COMMITTED  # the truth, recorded whoever holds the item now
        assert sandbox.counts()["deliveries"] == 1

    @pytest.mark.parametrize("payload", [NOTIFY, {**NOTIFY, "body": {**NOTIFY["body"], "body": "regenerated"}}],
                             ids=["same-key", "same-slot"])
    def test_that_holds_blocks_a_duplicate_or_conflict_as_always(self, sandbox, payload):
        run_notify()
        run = leased_item("worker-b")
        result = run_notify(payload, lease_token="worker-b", fence=lease_fence(run))
        assert not result.called and result.blocked in ("duplicate", "conflict")
        assert BlockedDuplicate.objects.count() == 1
        assert sandbox.counts()["deliveries"] == 1

    @pytest.mark.parametrize("payload", [NOTIFY, {**NOTIFY, "body": {**NOTIFY["body"], "body": "regenerated"}}],
                             ids=["same-key", "same-slot"])
    def test_lost_meets_a_duplicate_or_conflict_and_counts_nothing(self, sandbox, payload):
        run_notify()

        def lost():
            raise Fenced("lease taken over")

        with pytest.raises(Fenced):
            run_notify(payload, lease_token="worker-b", fence=Fence("FALSE", (), lost))
        assert BlockedDuplicate.objects.count() == 0
        assert Effect.objects.get().state == EffectState.COMMITTED
        assert sandbox.counts()["deliveries"] == 1
