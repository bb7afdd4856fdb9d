"""Phase 2 as one statement with a caller's writes riding on it (`effect_call(fold=…)`,
`ledger.statements.Rider`): on PostgreSQL the fence, the outcome with its
transition and the rider's writes commit together in autocommit -- the
rider's only when the outcome was written and the fence held; the outcome,
the truth, whenever the row was still this caller's attempt."""

import pytest
from django.db import connection

from ledger.channels.base import CallResult
from ledger.gate import OutcomeRefused, effect_call, effect_prepare, intent_commit
from ledger.models import Effect, EffectState, EffectTransition
from ledger.statements import Rider
from tests.factories import make_task
from ticketagent.models import Item, ItemStatus
from ticketagent.pipeline.lease import ItemRun, lease_fence

from .helpers import NOTIFY, Answers, Statements

pytestmark = pytest.mark.django_db(transaction=True)

MARK = ("m AS (INSERT INTO ledger_effecttransition (effect_id, event, from_state, to_state, actor, note, snapshot, at) "
        "SELECT %s, 'MARK', '', 'intent', '', %s, '{}'::jsonb, now() WHERE EXISTS (SELECT 1 FROM ok) RETURNING id)")


def begin(token="worker-a"):
    """A leased item and its effect's intent, committed (phase 1 with the lease as a folded fence)."""
    item = Item.objects.filter(task=make_task(1)).get()
    Item.objects.filter(pk=item.pk).update(status=ItemStatus.RUNNING, lease_token=token, lease_owner="test")
    item.refresh_from_db()
    run = ItemRun(item=item, token=token, cursor=0, outputs={})
    intent = effect_prepare(action="notify_customer", payload=NOTIFY, owner_task="t1", owner_item=str(item.pk),
                            owner_step="notify_customer", lease_token=token)
    effect, blocked = intent_commit(intent, lease_fence(run))
    assert blocked == ""
    return run, intent, effect


def marks():
    return list(EffectTransition.objects.filter(event="MARK").values_list("note", flat=True))


def folding(run, effect, asked, note="recovery point"):
    def fold(result):
        asked.append(result.state)
        return lease_fence(run), Rider(ctes=MARK, params=[effect.pk, note], answers="(SELECT count(*) FROM m)")
    return fold


def never(*args):
    raise AssertionError("phase 2's transaction ran although the phase was folded")


class TestARider:
    def test_commits_with_the_outcome_in_one_statement_and_answers(self):
        run, intent, effect = begin()
        asked, statements = [], Statements()
        with connection.execute_wrapper(statements):
            result = effect_call(intent, effect, channel=Answers(CallResult(EffectState.COMMITTED, external_ref="r-1")),
                                 outcome_fence=never, then=never, fold=folding(run, effect, asked))
        assert (result.called, result.blocked, result.state, result.answers) == (True, "", EffectState.COMMITTED, (1,))
        assert asked == [EffectState.COMMITTED]
        assert statements.seen == [("WITH", False)]  # one statement, no transaction block
        row = Effect.objects.get()
        assert (row.state, row.external_ref) == (EffectState.COMMITTED, "r-1")
        assert marks() == ["recovery point"]
        snapshots = list(EffectTransition.objects.exclude(event="MARK").order_by("id").values_list("snapshot", flat=True))
        assert snapshots == [{**row.snapshot(), "state": "intent", "external_ref": ""}, row.snapshot()]

    def test_whose_fence_was_lost_during_the_call_is_not_written_but_the_outcome_is(self):
        run, intent, effect = begin()

        def taken_over():
            Item.objects.filter(pk=run.item.pk).update(lease_token="worker-b")

        result = effect_call(intent, effect, fold=folding(run, effect, []), outcome_fence=never, then=never,
                             channel=Answers(CallResult(EffectState.COMMITTED, external_ref="r-2"), before=taken_over))
        assert (result.blocked, result.answers) == ("fenced", None)
        assert Effect.objects.get().state == EffectState.COMMITTED  # the truth is recorded
        assert marks() == []

    def test_whose_fence_held_while_the_row_was_no_longer_its_attempt_keeps_nothing(self):
        run, intent, effect = begin()

        def recovered():  # another holder's recovery turned the intent into unknown meanwhile
            Effect.objects.filter(pk=effect.pk).update(state=EffectState.UNKNOWN)

        with pytest.raises(OutcomeRefused, match="nothing of phase 2 is kept"):
            effect_call(intent, effect, fold=folding(run, effect, []), outcome_fence=never, then=never,
                        channel=Answers(CallResult(EffectState.COMMITTED, external_ref="r-3"), before=recovered))
        assert marks() == []
        assert Effect.objects.get().state == EffectState.UNKNOWN
        assert not EffectTransition.objects.filter(event="EFFECT_COMMITTED").exists()
        assert effect.state == EffectState.INTENT  # the instance is not left claiming an outcome

    def test_not_given_for_a_result_leaves_phase_2_to_its_transaction(self):
        run, intent, effect = begin()
        ran = []

        def fold(result):
            return None  # e.g. a refusal: the caller records no step

        result = effect_call(intent, effect, channel=Answers(CallResult(EffectState.FAILED, error="422 refused")),
                             outcome_fence=lambda result: ran.append(("fence", result.state)),
                             then=lambda e: ran.append(("then", e.state)), fold=fold)
        assert (result.blocked, result.answers) == ("", None)
        assert ran == [("fence", EffectState.FAILED), ("then", EffectState.FAILED)]
