"""A person's verdict on an unknown effect: happened (committed), did not
happen (failed, so the item may retry with the same key) or skip; who, when
and why are recorded. Only an unknown effect takes a verdict, only a known
verdict with a reason."""

import pytest

from ledger.faults import SimulatedCrash, arm
from ledger.models import EffectState, ResolvedBy, Verdict
from ledger.services import ReviewError, effect_review, effects_mark_unknown

from .helpers import run_notify

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def unknown(sandbox):
    arm("after_call")
    with pytest.raises(SimulatedCrash):
        run_notify()
    [effect] = effects_mark_unknown(owner_item="i1", actor="recovery", note="holder died")
    return effect


class TestReviewVerdicts:
    @pytest.mark.parametrize("verdict, state", [
        (Verdict.HAPPENED, EffectState.COMMITTED),
        (Verdict.NOT_HAPPENED, EffectState.FAILED),
        (Verdict.SKIP, EffectState.SKIPPED),
    ])
    def test_each_verdict_sets_its_state_and_records_who_when_and_why(self, unknown, verdict, state):
        effect = effect_review(effect_id=unknown.pk, verdict=verdict, reason="  checked the inbox  ", actor="alice")
        effect.refresh_from_db()
        assert (effect.state, effect.resolved_by, effect.verdict) == (state, ResolvedBy.REVIEW, verdict)
        assert (effect.reviewed_by, effect.review_reason) == ("alice", "checked the inbox")
        assert effect.reviewed_at is not None
        last = effect.transitions.last()
        assert (last.from_state, last.to_state, last.actor, last.note) == (
            EffectState.UNKNOWN, state, "alice", f"{verdict}: checked the inbox")

    def test_did_not_happen_lets_the_same_row_retry_with_the_same_key(self, unknown, sandbox):
        effect_review(effect_id=unknown.pk, verdict=Verdict.NOT_HAPPENED, reason="bounced", actor="alice")
        retry = run_notify(claim_token="worker-b")
        assert retry.called and retry.effect.pk == unknown.pk and retry.effect.attempts == 2
        # the first call had in fact arrived: the retry looks its key up first, finds it and sends nothing again
        assert retry.effect.state == EffectState.COMMITTED and retry.effect.external_ref.startswith("dlv-")
        counts = sandbox.counts()
        assert (counts["requests"], counts["replays"], counts["by_key"]) == (1, 0, {unknown.idempotency_key: 1})

    @pytest.mark.parametrize("reason", ["", "   ", None])
    def test_a_verdict_without_a_reason_is_refused(self, unknown, reason):
        with pytest.raises(ReviewError, match="a reason is required"):
            effect_review(effect_id=unknown.pk, verdict=Verdict.HAPPENED, reason=reason, actor="alice")
        unknown.refresh_from_db()
        assert unknown.state == EffectState.UNKNOWN and unknown.reviewed_by == ""

    @pytest.mark.parametrize("verdict", ["maybe", Verdict.NONE])
    def test_an_unknown_verdict_is_refused(self, unknown, verdict):
        with pytest.raises(ReviewError, match=f"unknown verdict {verdict!r}"):
            effect_review(effect_id=unknown.pk, verdict=verdict, reason="why not", actor="alice")
        unknown.refresh_from_db()
        assert unknown.state == EffectState.UNKNOWN and unknown.transitions.count() == 2

    def test_an_effect_that_is_not_unknown_is_refused(self, unknown):
        effect_review(effect_id=unknown.pk, verdict=Verdict.HAPPENED, reason="seen", actor="alice")
        with pytest.raises(ReviewError, match="this effect is committed, not unknown"):
            effect_review(effect_id=unknown.pk, verdict=Verdict.SKIP, reason="again", actor="bob")
        unknown.refresh_from_db()
        assert (unknown.state, unknown.reviewed_by) == (EffectState.COMMITTED, "alice")
