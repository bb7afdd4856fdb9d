"""When a look-up may be trusted depends on why the effect is unknown: a call
the helpdesk answered (a 503, an answer cut after its status line) cannot land
later and is looked up at once; a call that timed out or was dropped before any
answer may still land, and waits out the channel's longest call. The clock is
set by hand; the helpdesk is the real sandbox (or, for a cut answer, a real
socket server)."""

import datetime as dt
import socket
import threading

import pytest
from django.utils import timezone

from ledger.channels.http import AnswerCut, HttpClient, call
from ledger.channels.rest import RestHelpdeskChannel
from ledger.models import Effect, EffectState, Verdict
from ledger.services import RECONCILE_MARGIN_SECONDS, effect_reconcile, reconcile_not_before

from .helpers import run_notify

pytestmark = pytest.mark.django_db(transaction=True)



def bound(effect: Effect) -> dt.timedelta:
    return dt.timedelta(seconds=RestHelpdeskChannel().max_call_seconds + RECONCILE_MARGIN_SECONDS)


def at(monkeypatch, instant):
    monkeypatch.setattr(timezone, "now", lambda: instant)


class TestAnAnsweredUnknownIsLookedUpAtOnce:
    def test_a_503_may_be_asked_about_the_moment_it_was_recorded(self, sandbox, lookups, monkeypatch):
        sandbox.set_faults(error_next={"notify": 1}, error_status=503)
        effect = run_notify().effect
        assert (effect.state, effect.answered) == (EffectState.UNKNOWN, True)
        assert reconcile_not_before(effect) == effect.outcome_at < effect.intent_at + bound(effect)
        at(monkeypatch, effect.outcome_at)
        effect = effect_reconcile(effect_id=effect.pk)
        assert lookups == [effect.idempotency_key]
        # the 503 recorded nothing: "not found" is the truth, and the item may retry with the same key
        assert (effect.state, effect.verdict) == (EffectState.FAILED, Verdict.NOT_HAPPENED)
        assert sandbox.deliveries(key=effect.idempotency_key) == []

    def test_answered_again_on_a_retry_it_backs_off(self, sandbox, monkeypatch):
        sandbox.set_faults(error_next={"notify": 1}, error_status=503)
        effect = run_notify().effect
        Effect.objects.filter(pk=effect.pk).update(attempts=2)
        effect.refresh_from_db()
        assert reconcile_not_before(effect) == effect.outcome_at, "one retry answered again: still at once"
        Effect.objects.filter(pk=effect.pk).update(attempts=4)
        effect.refresh_from_db()
        assert reconcile_not_before(effect) == effect.outcome_at + dt.timedelta(seconds=2)
        Effect.objects.filter(pk=effect.pk).update(attempts=30)
        effect.refresh_from_db()
        assert reconcile_not_before(effect) == effect.outcome_at + bound(effect), "never longer than the bound"


class TestAnUnansweredUnknownWaitsForTheCallToEnd:
    def test_a_drop_before_any_answer_waits_the_whole_bound(self, sandbox, lookups, monkeypatch):
        sandbox.set_faults(drop_next={"notify": 1})
        effect = run_notify().effect
        assert (effect.state, effect.answered) == (EffectState.UNKNOWN, False)
        ready = effect.intent_at + bound(effect)
        assert reconcile_not_before(effect) == ready
        at(monkeypatch, ready - dt.timedelta(microseconds=1))
        assert effect_reconcile(effect_id=effect.pk).state == EffectState.UNKNOWN and lookups == []
        at(monkeypatch, ready)
        effect = effect_reconcile(effect_id=effect.pk)
        # the drop came after the write took effect: found, committed, nothing sent again
        assert (effect.state, effect.verdict) == (EffectState.COMMITTED, Verdict.HAPPENED)
        assert len(sandbox.deliveries(key=effect.idempotency_key)) == 1

    def test_a_timeout_waits_the_whole_bound(self, sandbox, lookups, monkeypatch):
        sandbox.set_faults(latency_ms=2500)  # past the read timeout (2 s in the test settings)
        effect = run_notify().effect
        sandbox.clear_faults()
        assert (effect.state, effect.answered) == (EffectState.UNKNOWN, False)
        assert reconcile_not_before(effect) == effect.intent_at + bound(effect)


@pytest.fixture
def cut_server():
    """A server that sends a status line and headers promising a body, then closes."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nContent-Type: application/json\r\n\r\n{\"id")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    server.close()


def test_an_answer_cut_after_its_status_line_counts_as_answered(cut_server):
    client = HttpClient(cut_server, system="the helpdesk", connect_timeout=1, read_timeout=1)
    with pytest.raises(AnswerCut):
        client.request("POST", "/api/tickets/T-1/notify", {"x": 1})
    result = call(client, "POST", "/api/tickets/T-1/notify", {"x": 1})
    assert (result.state, result.answered) == (EffectState.UNKNOWN, True)
    assert "answered 200" in result.error
