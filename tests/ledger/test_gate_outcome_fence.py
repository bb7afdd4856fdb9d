"""Phase 2 with a fence told the call's result (`effect_call(outcome_fence=…)`):
a caller may fold its own recovery point into its fence check. Those writes
commit with the outcome or not at all."""

import pytest
from django.db import connection, transaction

from ledger.channels.base import CallResult
from ledger.gate import Fenced, OutcomeRefused, effect_call, effect_prepare, intent_record
from ledger.models import Effect, EffectState, EffectTransition

from .helpers import NOTIFY, Answers

pytestmark = pytest.mark.django_db(transaction=True)


def begin(token="worker-a"):
    intent = effect_prepare(action="notify_customer", payload=NOTIFY, owner_task="t1", owner_item="i1",
                            owner_step="notify_customer", lease_token=token)
    with transaction.atomic():  # phase 1 in the caller's transaction, committed before the call
        effect, blocked = intent_record(intent)
    return intent, effect, blocked


def marks():
    with connection.cursor() as cursor:
        cursor.execute("SELECT note FROM ledger_effecttransition WHERE event = 'MARK' ORDER BY id")
        return [row[0] for row in cursor.fetchall()]


def mark(effect, text):
    EffectTransition.objects.create(effect=effect, event="MARK", to_state=effect.state, note=text)


class TestAnOutcomeFence:
    def test_is_told_the_result_and_its_writes_commit_with_the_outcome(self):
        intent, effect, _ = begin()
        seen, ran = [], []

        def fence(result):
            seen.append(result.state)
            mark(effect, f"recovery point for {result.external_ref}")

        result = effect_call(intent, effect, channel=Answers(CallResult(EffectState.COMMITTED, external_ref="r-1")),
                             outcome_fence=fence, then=lambda e: ran.append(e.state))
        assert (result.called, result.blocked, result.state) == (True, "", EffectState.COMMITTED)
        assert seen == [EffectState.COMMITTED] and ran == [EffectState.COMMITTED]
        assert marks() == ["recovery point for r-1"]
        row = Effect.objects.get()
        assert row.state == EffectState.COMMITTED
        # each transition carries the row after it: the change's one audit record
        snapshots = list(EffectTransition.objects.exclude(event="MARK").order_by("id").values_list("snapshot", flat=True))
        assert snapshots == [{**row.snapshot(), "state": "intent", "external_ref": ""}, row.snapshot()]

    def test_that_fails_records_the_outcome_without_then(self):
        intent, effect, _ = begin()
        ran = []

        def fence(result):
            raise Fenced("lease taken over")

        result = effect_call(intent, effect, channel=Answers(CallResult(EffectState.COMMITTED, external_ref="r-2")),
                             outcome_fence=fence, then=lambda e: ran.append(e))
        assert result.blocked == "fenced" and ran == []
        assert Effect.objects.get().state == EffectState.COMMITTED  # the truth is recorded

    def test_that_held_while_the_row_was_no_longer_its_attempt_keeps_nothing(self):
        intent, effect, _ = begin()

        def taken_over():  # another holder's recovery turned the intent into unknown meanwhile
            Effect.objects.filter(pk=effect.pk).update(state=EffectState.UNKNOWN)

        def fence(result):
            mark(effect, "recovery point")

        with pytest.raises(OutcomeRefused, match="nothing of phase 2 is kept"):
            effect_call(intent, effect, channel=Answers(CallResult(EffectState.COMMITTED, external_ref="r-3"),
                                                        before=taken_over), outcome_fence=fence)
        assert marks() == []  # rolled back with the phase
        assert Effect.objects.get().state == EffectState.UNKNOWN
        assert not EffectTransition.objects.filter(event="EFFECT_COMMITTED").exists()
