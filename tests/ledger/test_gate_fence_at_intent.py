"""A caller whose fence fails at the intent (phase 1) gets no effect: the
helpdesk receives nothing and the ledger keeps no `intent` row for it."""

import pytest

from ledger.gate import Fenced
from ledger.models import BlockedDuplicate, Effect, EffectState, EffectTransition

from .helpers import NOTIFY, run_notify

pytestmark = pytest.mark.django_db(transaction=True)


def lost():
    raise Fenced("lease taken over")


# A refused INSERT (… ON CONFLICT DO NOTHING inserts nothing) does not abort
# the transaction: the general path (look-up, retry, duplicate, conflict)
# runs in the same one, under the one fence check made before the INSERT.
FENCES = pytest.mark.parametrize("fence", [lambda: lost], ids=["lost-at-once"])


def received(sandbox) -> tuple[int, int]:
    """(write requests, deliveries) the sandbox helpdesk has seen."""
    counts = sandbox.counts()
    return counts["requests"], counts["deliveries"]


class TestAFenceFailingAtTheIntent:
    def test_a_new_effect_is_not_attempted_and_leaves_no_row(self, sandbox):
        with pytest.raises(Fenced):
            run_notify(fence=lost)
        assert received(sandbox) == (0, 0)
        assert sandbox.deliveries() == []
        assert not Effect.objects.filter(state=EffectState.INTENT).exists()
        assert Effect.objects.count() == 0 and EffectTransition.objects.count() == 0

        # the same effect with a fence that holds does reach the helpdesk
        result = run_notify()
        assert result.called and result.state == EffectState.COMMITTED
        assert received(sandbox) == (1, 1)

    @FENCES
    def test_a_retry_of_a_failed_effect_is_not_attempted_and_the_row_stays_failed(self, sandbox, fence):
        sandbox.set_faults(error_next={"notify": 1}, error_status=422)
        first = run_notify()
        assert first.state == EffectState.FAILED
        requests_before, _ = received(sandbox)

        with pytest.raises(Fenced):
            run_notify(lease_token="worker-b", fence=fence())
        assert received(sandbox) == (requests_before, 0)
        effect = Effect.objects.get()
        assert (effect.state, effect.attempts, effect.lease_token) == (EffectState.FAILED, 1, "worker-a")
        assert not Effect.objects.filter(state=EffectState.INTENT).exists()

        # with its fence held, the same retry goes out, on the same row
        retry = run_notify(lease_token="worker-b")
        assert retry.called and retry.effect.pk == effect.pk and retry.effect.attempts == 2
        assert received(sandbox) == (requests_before + 1, 1)

    @FENCES
    @pytest.mark.parametrize("payload", [NOTIFY, {**NOTIFY, "body": {**NOTIFY["body"], "body": "regenerated"}}],
                             ids=["same-key", "same-slot"])
    def test_a_duplicate_or_conflict_is_neither_attempted_nor_counted_as_blocked(self, sandbox, fence, payload):
        run_notify()
        with pytest.raises(Fenced):
            run_notify(payload, lease_token="worker-b", fence=fence())
        assert received(sandbox) == (1, 1)
        assert BlockedDuplicate.objects.count() == 0
        assert Effect.objects.get().state == EffectState.COMMITTED
