"""A retry after "did not happen" reuses the row and its key: attempt + 1,
back to `intent` under the new caller's lease token, with the new intent
time, the old error cleared and the newest approval recorded."""

import datetime as dt
import time

import pytest
from django.utils import timezone

from ledger.channels.base import Abilities, Cause, LookupResult, committed, failed, unknown
from ledger.models import BlockedDuplicate, Effect, EffectState, Verdict
from ledger.services import effect_review

from .helpers import NOTIFY, Answers, run_notify

pytestmark = pytest.mark.django_db(transaction=True)

CLOSE = {"ticket": "T-1", "body": {"reason": "solved"}}


def close(claim_token, authorized_by):
    from tests.gate_run import effect_run

    return effect_run(action="close_ticket", payload=CLOSE, owner_task="t1", owner_item="i1",
                      owner_step="close_ticket", claim_token=claim_token, authorized_by=authorized_by)


def close_seen_during_call(claim_token, authorized_by) -> dict:
    """The three calls by hand: the row as the call sees it (its intent committed)."""
    from django.db import transaction

    from ledger.gate import effect_perform, intent_prepare, intent_record, outcome_record

    intent = intent_prepare(action="close_ticket", payload=CLOSE, owner_task="t1", owner_item="i1",
                            owner_step="close_ticket", claim_token=claim_token, authorized_by=authorized_by)
    with transaction.atomic():
        effect = intent_record(intent).effect
    seen = Effect.objects.filter(pk=effect.pk).values("state", "claim_token", "attempts").get()
    result = effect_perform(intent, effect, deadline=time.monotonic() + 60)
    with transaction.atomic():
        assert outcome_record(intent, effect, result)
    return seen


class TestARetryReusesTheRow:
    def test_the_row_is_back_in_intent_under_the_new_token_and_approval(self, sandbox):
        sandbox.set_faults(error_next={"close": 1}, error_status=422)
        first = close("worker-a", "approved by alice").effect
        assert (first.state, first.authorized_by) == (EffectState.FAILED, "approved by alice")
        Effect.objects.filter(pk=first.pk).update(intent_at=timezone.now() - dt.timedelta(hours=1))

        seen = close_seen_during_call("worker-b", "approved by bob")
        effect = Effect.objects.get()
        assert effect.pk == first.pk
        assert seen == {"state": "intent", "claim_token": "worker-b", "attempts": 2}
        assert (effect.state, effect.attempts, effect.claim_token) == (EffectState.COMMITTED, 2, "worker-b")
        assert (effect.authorized_by, effect.last_error) == ("approved by bob", "")
        assert timezone.now() - effect.intent_at < dt.timedelta(minutes=1)
        assert effect.idempotency_key == first.idempotency_key
        last_two = list(effect.transitions.values_list("from_state", "to_state", "note"))[-2:]
        assert last_two[0] == ("failed", "intent", "attempt 2 with the same key")
        assert sandbox.counts()["by_endpoint"]["close"] == 1

    def test_each_retry_with_the_same_key_counts_its_attempt(self, sandbox):
        """Refused twice, then through: the notes count the attempts 2 and 3, on the one row and key."""
        sandbox.set_faults(error_next={"close": 2}, error_status=422)
        assert close("worker-a", "approved by alice").effect.state == EffectState.FAILED
        assert close("worker-b", "approved by alice").effect.state == EffectState.FAILED
        assert close("worker-c", "approved by alice").effect.state == EffectState.COMMITTED
        effect = Effect.objects.get()
        notes = list(effect.transitions.filter(event="EFFECT_RETRY").values_list("note", flat=True))
        assert notes == ["attempt 2 with the same key", "attempt 3 with the same key"], notes
        assert effect.attempts == 3 and sandbox.counts()["by_endpoint"]["close"] == 1

    def test_a_once_effect_keeps_its_approval_when_the_retry_has_none(self, sandbox):
        sandbox.set_faults(error_next={"notify": 1}, error_status=422)
        from tests.gate_run import effect_run

        first = effect_run(action="notify_customer", payload={"ticket": "T-1", "body": {"to": "a@example.com",
                           "subject": "s", "body": "b"}}, owner_task="t1", owner_item="i1",
                           owner_step="notify_customer", claim_token="worker-a", authorized_by="approved by alice")
        assert first.state == EffectState.FAILED
        retry = run_notify({"ticket": "T-1", "body": {"to": "a@example.com", "subject": "s", "body": "b"}},
                           claim_token="worker-b")
        assert retry.called and retry.effect.authorized_by == "approved by alice"


REGENERATED = {**NOTIFY, "body": {**NOTIFY["body"], "body": "A regenerated draft, under a newer playbook."}}


class TestAFailedSlot:
    """A `once` effect that failed provably did not happen: another payload for its slot goes out, on the same
    row (its new key), exactly once; a slot whose effect happened, or may have, still blocks it as a conflict."""

    @pytest.mark.parametrize("old, new", [(NOTIFY, REGENERATED), (REGENERATED, NOTIFY)], ids=["one-way", "reversed"])
    def test_takes_a_new_payload_on_the_same_row(self, sandbox, lookups, old, new):
        """(Both ways round: whichever of the two keys sorts first, the row takes the new one.)"""
        from tests.gate_run import effect_run

        sandbox.set_faults(error_next={"notify": 1}, error_status=422)
        first = effect_run(action="notify_customer", payload=old, owner_task="t1", owner_item="i1",
                           owner_step="notify_customer", claim_token="worker-a", authorized_by="approved by alice").effect
        assert first.state == EffectState.FAILED
        retry = run_notify(new, claim_token="worker-b")
        assert (retry.called, retry.blocked, retry.state) == (True, "", EffectState.COMMITTED)
        effect = Effect.objects.get()
        assert (effect.pk, effect.attempts, effect.claim_token) == (first.pk, 2, "worker-b")
        assert effect.idempotency_key != first.idempotency_key and effect.payload == new
        assert effect.authorized_by == "", "an approval of the payload that did not happen is not this one's"
        assert lookups == [effect.idempotency_key], "the retry looked its own key up before writing"
        assert [d["key"] for d in sandbox.deliveries(endpoint="notify")] == [effect.idempotency_key]
        retry_note = effect.transitions.get(event="EFFECT_RETRY").note
        assert retry_note == (f"attempt 2 with a new payload and key: the slot's earlier payload "
                              f"({first.idempotency_key[:12]}) did not happen")
        assert not BlockedDuplicate.objects.exists()

        again = run_notify(old, claim_token="worker-c")  # the first payload, once more: the slot is taken now
        assert (again.called, again.blocked) == (False, "conflict")
        assert sandbox.counts()["by_endpoint"]["notify"] == 1

    def test_each_new_payload_counts_its_attempt(self, sandbox, lookups):
        """Two payloads refused in turn, then a third that goes out: the notes count the attempts 2 and 3."""
        from tests.gate_run import effect_run

        sandbox.set_faults(error_next={"notify": 2}, error_status=422)
        first = effect_run(action="notify_customer", payload=NOTIFY, owner_task="t1", owner_item="i1",
                           owner_step="notify_customer", claim_token="worker-a", authorized_by="").effect
        assert first.state == EffectState.FAILED
        assert run_notify(REGENERATED, claim_token="worker-b").state == EffectState.FAILED
        third = {**NOTIFY, "body": {**NOTIFY["body"], "body": "A third draft."}}
        assert run_notify(third, claim_token="worker-c").state == EffectState.COMMITTED
        notes = list(Effect.objects.get().transitions.filter(event="EFFECT_RETRY").values_list("note", flat=True))
        assert [n.split(" with ")[0] for n in notes] == ["attempt 2", "attempt 3"], notes
        assert sandbox.counts()["by_endpoint"]["notify"] == 1

    @pytest.mark.parametrize("state", [EffectState.UNKNOWN, EffectState.SKIPPED])
    def test_that_may_have_happened_still_blocks_another_payload(self, sandbox, state):
        first = run_notify().effect
        Effect.objects.filter(pk=first.pk).update(state=state)
        second = run_notify(REGENERATED, claim_token="worker-b")
        assert (second.called, second.blocked) == (False, "conflict")
        assert Effect.objects.get().idempotency_key == first.idempotency_key
        assert sandbox.counts()["by_endpoint"]["notify"] == 1


class Asks(Answers):
    """A helpdesk channel with a look-up that answers `seen`, and a call that answers `result`."""

    abilities = Abilities(key_carried="a header", honours_key=False, lookup="by key")

    def __init__(self, result, seen: LookupResult):
        super().__init__(result)
        self.seen, self.asked = seen, 0

    def lookup(self, key, payload):
        self.asked += 1
        return self.seen


SENT_NOTHING = failed("could not connect to the helpdesk: nothing was sent", answered=False, cause=Cause.UNAVAILABLE)


def retry_after(first, verdict_by, seen: LookupResult, second=SENT_NOTHING):
    """Attempt 1 answers `first`; if unknown, `verdict_by` settles it; attempt 2 answers `second` (by default: sent
    nothing) after `seen`."""
    attempt_1 = run_notify(channel=Answers(first)).effect
    if attempt_1.state == EffectState.UNKNOWN:
        verdict_by(attempt_1)
    channel = Asks(second, seen)
    attempt_2 = run_notify(claim_token="worker-b", channel=channel)
    assert attempt_2.called and channel.asked == 1 and attempt_2.effect.attempts == 2
    return Effect.objects.get(pk=attempt_2.effect.pk)


def judged_not_happened(effect):
    effect_review(effect_id=effect.pk, verdict=Verdict.NOT_HAPPENED, reason="nothing seen", actor="op")


MAY_HAVE_LANDED = unknown("read timed out after sending", answered=False)


class TestAttemptsShareWhatTheyKnow:
    """The row is the whole effect: a retry that sent nothing does not make an effect whose earlier attempt
    may have landed "failed, did not happen" -- unless the look-up before it answered "not found"."""

    def test_a_retry_that_sent_nothing_after_a_look_up_that_could_not_tell_leaves_it_unknown(self):
        effect = retry_after(MAY_HAVE_LANDED, judged_not_happened, LookupResult(None, detail="the helpdesk 503"))
        assert effect.state == EffectState.UNKNOWN, effect.last_error
        assert effect.last_error.startswith("attempt 2 sent nothing (could not connect to the helpdesk")
        assert "could not tell whether an earlier attempt landed (the helpdesk 503)" in effect.last_error
        # nothing of this attempt is in flight: reconcile may ask at once (no settle time to wait out)
        assert (effect.answered, effect.settle_after) == (True, None)
        assert list(effect.transitions.values_list("to_state", flat=True)) == [
            "intent", "unknown", "failed", "intent", "unknown"]

    def test_a_retry_that_went_through_after_a_look_up_that_could_not_tell_is_committed(self):
        effect = retry_after(MAY_HAVE_LANDED, judged_not_happened, LookupResult(None, detail="the helpdesk 503"),
                             second=committed("note-2"))
        assert (effect.state, effect.external_ref) == (EffectState.COMMITTED, "note-2"), effect.last_error

    def test_a_retry_whose_own_call_may_have_landed_keeps_its_settle_time(self):
        effect = retry_after(MAY_HAVE_LANDED, judged_not_happened, LookupResult(None, detail="the helpdesk 503"),
                             second=unknown("read timed out after sending", answered=False))
        assert (effect.state, effect.answered) == (EffectState.UNKNOWN, False), effect.last_error
        assert effect.settle_after is not None, "a call that may still land is not looked up before its bound"

    def test_after_a_look_up_that_answered_not_found_it_is_failed(self):
        effect = retry_after(MAY_HAVE_LANDED, judged_not_happened, LookupResult(False, detail="not on the ticket"))
        assert (effect.state, effect.last_error) == (EffectState.FAILED, SENT_NOTHING.error)

    def test_when_no_attempt_was_unknown_a_retry_that_sent_nothing_is_failed(self):
        refused = failed("the helpdesk refused with 422", answered=True, cause=Cause.REFUSED)
        effect = retry_after(refused, judged_not_happened, LookupResult(None, detail="the helpdesk 503"))
        assert (effect.state, effect.last_error) == (EffectState.FAILED, SENT_NOTHING.error)
