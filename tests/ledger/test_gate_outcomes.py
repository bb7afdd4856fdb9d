"""How the gate classifies what a channel answered."""

import pytest

from ledger.faults import SimulatedCrash, arm
from ledger.models import BlockedDuplicate, Effect, EffectState, EffectTransition
from ledger.services import effect_reconcile, effect_review

from ..conftest import wait_for
from .helpers import NOTIFY, run_notify, settled

pytestmark = pytest.mark.django_db(transaction=True)


def test_success_commits_with_the_external_reference_and_passes_the_key_down(sandbox):
    result = run_notify()
    assert result.state == EffectState.COMMITTED
    [delivery] = sandbox.deliveries()
    assert delivery["key"] == result.effect.idempotency_key
    assert result.effect.external_ref == delivery["id"]
    assert list(EffectTransition.objects.values_list("to_state", flat=True)) == ["intent", "committed"]


def test_a_4xx_refusal_is_failed(sandbox):
    bad = {"ticket": "T-1", "body": {"to": "not-an-email", "subject": "x", "body": "y"}}
    result = run_notify(bad)
    assert result.state == EffectState.FAILED
    assert "422" in result.effect.last_error
    assert sandbox.counts()["deliveries"] == 0


def test_a_5xx_is_unknown_then_reconcile_says_absent(sandbox):
    sandbox.set_faults(error_next={"notify": 1}, error_status=503)
    result = run_notify()
    assert result.state == EffectState.UNKNOWN
    effect = effect_reconcile(effect_id=settled(result.effect.pk))  # once the 503 can no longer land
    assert effect.state == EffectState.FAILED and effect.verdict == "not_happened"
    assert run_notify().state == EffectState.COMMITTED
    assert sandbox.counts()["by_endpoint"]["notify"] == 1


def test_a_timeout_is_unknown(sandbox, settings):
    settings.HELPDESK_READ_TIMEOUT = 0.3
    sandbox.set_faults(latency_ms=1200)
    result = run_notify()
    assert result.state == EffectState.UNKNOWN
    assert "timed out" in result.effect.last_error or "timeout" in result.effect.last_error.lower()
    # and rightly so: the helpdesk went on to accept the request after we gave up
    wait_for(lambda: sandbox.counts()["by_endpoint"]["notify"] == 1, timeout=5, message="the late delivery")
    assert effect_reconcile(effect_id=result.effect.pk).state == EffectState.COMMITTED


def test_accept_then_drop_is_unknown_then_reconciled_to_committed(sandbox):
    sandbox.set_faults(drop_next={"notify": 1})
    result = run_notify()
    assert result.state == EffectState.UNKNOWN
    assert sandbox.counts()["by_endpoint"]["notify"] == 1, "the write took effect before the drop"
    effect = effect_reconcile(effect_id=result.effect.pk)
    assert effect.state == EffectState.COMMITTED and effect.resolved_by == "reconcile"
    assert run_notify().called is False
    assert sandbox.counts()["by_endpoint"]["notify"] == 1


def test_connection_refused_before_sending_is_failed(sandbox, settings):
    settings.HELPDESK_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    result = run_notify()
    assert result.state == EffectState.FAILED
    assert "could not connect" in result.effect.last_error
    row = Effect.objects.get()
    assert row.answered is False and row.settle_after is None, "only an unknown waits for a settle time"


def test_each_change_is_announced_as_recorded_and_a_refusal_as_not(sandbox):
    """A listener copies into a log of its own only what the ledger has no transition of (`recorded`)."""
    from ledger.signals import effect_changed

    told = []

    def listen(sender, event, recorded=False, **kwargs):
        told.append((event, recorded))

    effect_changed.connect(listen)
    try:
        run_notify()
        run_notify(claim_token="worker-b")  # the same key again: blocked
    finally:
        effect_changed.disconnect(listen)
    assert told == [("EFFECT_INTENT", True), ("EFFECT_COMMITTED", True), ("EFFECT_BLOCKED", False)]
    assert EffectTransition.objects.count() == 2


def test_each_transition_records_the_row_as_it_became(sandbox):
    run_notify()
    row = Effect.objects.get()
    transitions = list(row.transitions.order_by("pk"))
    assert [t.to_state for t in transitions] == ["intent", "committed"]
    assert transitions[-1].snapshot == row.snapshot(), "every field of the row after the outcome, its id included"


def test_same_slot_other_payload_is_a_blocked_conflict(sandbox):
    first = run_notify()
    regenerated = {**NOTIFY, "body": {**NOTIFY["body"], "body": "A regenerated, different draft."}}
    second = run_notify(regenerated, claim_token="worker-b")
    assert second.blocked == "conflict" and not second.called
    assert second.effect.pk == first.effect.pk
    blocked = BlockedDuplicate.objects.get()
    assert blocked.kind == "conflict" and "regenerated" in blocked.payload_summary
    assert sandbox.counts()["by_endpoint"]["notify"] == 1


def test_overwrite_effects_have_no_slot(sandbox):
    draft = {"ticket": "T-1", "body": {"subject": "s", "body": "one"}}
    run_notify(draft, action="save_draft", step="save_draft")
    run_notify({"ticket": "T-1", "body": {"subject": "s", "body": "two"}}, action="save_draft", step="save_draft")
    assert Effect.objects.filter(slot__isnull=True).count() == 2
    assert sandbox.counts()["by_endpoint"]["draft"] == 2


def test_irreversible_needs_a_recorded_decision(sandbox):
    from ledger.gate import ApprovalRequired
    from tests.gate_run import effect_run

    with pytest.raises(ApprovalRequired):
        effect_run(action="close_ticket", payload={"ticket": "T-1", "body": {"reason": "done"}}, owner_task="t1",
                   owner_item="i1", owner_step="close_ticket", claim_token="w")
    assert Effect.objects.count() == 0


def test_review_decisions_need_a_reason_and_an_unknown_effect(sandbox):
    from ledger.services import ReviewError

    arm("after_call")
    with pytest.raises(SimulatedCrash):
        run_notify()
    from ledger.services import effects_mark_unknown

    [effect] = effects_mark_unknown(owner_item="i1", actor="recovery", note="died")
    with pytest.raises(ReviewError, match="reason"):
        effect_review(effect_id=effect.pk, verdict="happened", reason=" ", actor="alice")
    effect = effect_review(effect_id=effect.pk, verdict="happened", reason="customer confirmed", actor="alice")
    assert (effect.state, effect.resolved_by, effect.reviewed_by) == ("committed", "review", "alice")
    with pytest.raises(ReviewError, match="already resolved"):
        effect_review(effect_id=effect.pk, verdict="skip", reason="again", actor="alice")


def test_a_fenced_holder_cannot_commit(sandbox):
    """An orphaned work-horse whose lease was taken over finishes its call but
    cannot record the outcome: the row stays unknown for reconcile."""
    from ledger.services import effects_mark_unknown
    from ticketagent.channels.rest import RestHelpdeskChannel

    real_perform = RestHelpdeskChannel.perform

    def perform_then_lose_lease(self, spec, payload, key, deadline):
        result = real_perform(self, spec, payload, key, deadline)
        effects_mark_unknown(owner_item="i1", actor="recovery", note="lease expired")
        return result

    RestHelpdeskChannel.perform = perform_then_lose_lease
    try:
        result = run_notify()
    finally:
        RestHelpdeskChannel.perform = real_perform
    assert result.blocked == "not ours"
    assert Effect.objects.get().state == EffectState.UNKNOWN
    assert effect_reconcile(effect_id=result.effect.pk).state == EffectState.COMMITTED
