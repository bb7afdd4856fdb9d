"""Texts longer than their column are cut to it, never refused: a channel's
external reference (200) and error (4000), a transition's note (2000), a
reconcile answer (300) and a reviewer's reason (2000)."""

import pytest

from ledger.channels.base import CallResult, Channel, LookupResult
from ledger.faults import SimulatedCrash, arm
from ledger.models import Effect, EffectState, Verdict
from ledger.services import effect_reconcile, effect_review, effects_mark_unknown
from ticketagent.channels.rest import RestHelpdeskChannel

from .helpers import run_notify

pytestmark = pytest.mark.django_db(transaction=True)


class Answers(Channel):
    name = "helpdesk"

    def __init__(self, result: CallResult):
        self.result = result

    def perform(self, spec, payload, key, deadline):
        return self.result


def unknown_effect() -> Effect:
    arm("after_intent")
    with pytest.raises(SimulatedCrash):
        run_notify()
    [effect] = effects_mark_unknown(owner_item="i1", actor="recovery", note="holder died")
    return effect


class TestLongTextsAreCutToTheirColumns:
    def test_a_long_reference_is_cut_at_200_and_the_note_at_2000(self):
        result = run_notify(channel=Answers(CallResult(EffectState.COMMITTED, external_ref="r" * 2100)))
        effect = Effect.objects.get()
        assert result.effect.external_ref == effect.external_ref == "r" * 200
        assert effect.transitions.last().note == "r" * 2000

    def test_a_long_error_is_cut_at_4000(self):
        result = run_notify(channel=Answers(CallResult(EffectState.FAILED, error="e" * 4100)))
        effect = Effect.objects.get()
        assert result.effect.last_error == effect.last_error == "e" * 4000
        assert effect.transitions.last().note == "e" * 2000

    def test_a_long_reconcile_answer_is_cut_at_300_and_its_reference_at_200(self, monkeypatch):
        effect = unknown_effect()
        found = LookupResult(True, external_ref="r" * 250, detail="d" * 350)
        monkeypatch.setattr(RestHelpdeskChannel, "lookup", lambda self, key, payload: found)
        effect_reconcile(effect_id=effect.pk)
        effect.refresh_from_db()
        assert (effect.state, effect.external_ref, effect.last_reconcile) == (
            EffectState.COMMITTED, "r" * 200, "d" * 300)

    def test_a_long_review_reason_is_cut_at_2000(self):
        effect = unknown_effect()
        effect_review(effect_id=effect.pk, verdict=Verdict.SKIP, reason="x" * 2100, actor="alice")
        effect.refresh_from_db()
        assert effect.review_reason == "x" * 2000
        assert effect.transitions.last().note == "skip: " + "x" * 1994
