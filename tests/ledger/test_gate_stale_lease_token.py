"""An outcome reported under a stale lease token never lands on the row a
later attempt holds.

Attempt 1 (token A) hangs in its call; recovery turns its intent into
`unknown`, reconcile finds nothing ("did not happen"), and attempt 2
(token B) takes the same row back to `intent` and delivers. A's answer then
arrives: it must not overwrite B's attempt, or the ledger would call B's
delivery "failed" and a third attempt would notify the customer twice.
"""

import threading

import pytest
from django.db import connections

from ledger.channels.base import CallResult, Channel
from ledger.models import EffectState, Verdict
from ledger.services import effect_reconcile, effects_mark_unknown
from ledger.signals import effect_changed
from ticketagent.channels.rest import RestHelpdeskChannel

from .helpers import run_notify, settled

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 30


class LateAnswer(Channel):
    """Attempt 1's call: it sends nothing the helpdesk keeps, and answers
    only when told to -- a late refusal."""

    name = "helpdesk"

    def __init__(self):
        self.calling = threading.Event()
        self.answer = threading.Event()

    def perform(self, spec, payload, key, deadline):
        self.calling.set()
        assert self.answer.wait(TIMEOUT), "attempt 1 was never released"
        return CallResult(EffectState.FAILED, error="helpdesk refused with 400: late answer")


class DeliverThenLetTheLateAnswerIn(RestHelpdeskChannel):
    """Attempt 2's call: a real delivery; before it returns, attempt 1's
    answer is let in and its phase 2 runs to the end."""

    def __init__(self, late: LateAnswer, attempt_1: threading.Thread):
        super().__init__()
        self.late, self.attempt_1 = late, attempt_1

    def perform(self, spec, payload, key, deadline):
        result = super().perform(spec, payload, key, deadline)
        self.late.answer.set()
        self.attempt_1.join(TIMEOUT)
        assert not self.attempt_1.is_alive(), "attempt 1's phase 2 did not finish"
        return result


@pytest.fixture
def fenced():
    """(actor, note) of every outcome the gate refused to record."""
    seen = []

    def on_change(sender, event, actor, note, **kwargs):
        if event == "EFFECT_FENCED":
            seen.append((actor, note))

    effect_changed.connect(on_change, weak=False)
    yield seen
    effect_changed.disconnect(on_change)


class TestAStaleLeaseTokenAfterARetry:
    def test_the_late_outcome_of_attempt_1_does_not_overwrite_attempt_2(self, sandbox, fenced):
        sandbox.set_faults(honor_keys=False)  # as most helpdesks: a second call would be a second notification
        late = LateAnswer()
        results = {}

        def attempt_1():
            try:
                results["A"] = run_notify(claim_token="token-a", channel=late)
            except BaseException as exc:  # noqa: BLE001 - reported by the assertions below
                results["A"] = exc
            finally:
                connections.close_all()

        thread = threading.Thread(target=attempt_1)
        thread.start()
        assert late.calling.wait(TIMEOUT)

        # token A's holder is presumed dead: recovery, then reconcile
        [effect] = effects_mark_unknown(owner_item="i1", actor="recovery", note="lease expired")
        effect = effect_reconcile(effect_id=settled(effect.pk))
        assert (effect.state, effect.verdict) == (EffectState.FAILED, Verdict.NOT_HAPPENED)

        b = run_notify(claim_token="token-b", channel=DeliverThenLetTheLateAnswerIn(late, thread))
        a = results["A"]
        assert not isinstance(a, BaseException), a
        assert a.blocked == "not ours", "A's outcome was refused"
        assert b.called and b.blocked == "" and b.effect.pk == effect.pk

        effect.refresh_from_db()
        [delivery] = sandbox.deliveries(key=effect.idempotency_key)
        assert (effect.state, effect.claim_token, effect.attempts) == (EffectState.COMMITTED, "token-b", 2)
        assert effect.external_ref == delivery["id"] and effect.last_error == ""
        assert list(effect.transitions.values_list("to_state", "actor")) == [
            ("intent", "token-a"), ("unknown", "recovery"), ("failed", "reconcile"),
            ("intent", "token-b"), ("committed", "token-b"),
        ]

        assert fenced == [("token-a", "the caller's token saw failed: helpdesk refused with 400: late answer")]

        # and so a third attempt is blocked: the customer is notified once
        c = run_notify(claim_token="token-c")
        assert not c.called and c.blocked == "duplicate"
        assert sandbox.counts()["by_endpoint"]["notify"] == 1
