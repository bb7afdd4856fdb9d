"""When a look-up's "not found" may be trusted depends on why the effect is
unknown. An answer that proves the system handled the request (a 2xx status
line, then the connection cut) is trusted at once; a 5xx proves nothing -- a
gateway may still hand the request upstream -- and, like a call that timed out
or was dropped before any answer, it waits out the channel's in-flight bound
from its outcome (the database's clock). A found write is committed whenever it
is asked. The helpdesk is the real sandbox (or, for a cut answer, a real socket
server)."""

import datetime as dt
import socket
import threading

import pytest

from ledger import services
from ledger.channels.base import CallDeadline
from ledger.channels.http import AnswerCut, HttpClient, call
from ledger.clock import SETTLE_MARGIN_SECONDS, db_now
from ledger.models import Effect, EffectState, Verdict
from ledger.services import effect_reconcile, reconcile_not_before

from .helpers import run_notify, settled

pytestmark = pytest.mark.django_db(transaction=True)



def at(monkeypatch, instant):
    monkeypatch.setattr(services, "db_now", lambda: instant)


class TestA5xxProvesNothing:
    @pytest.mark.parametrize("status", [502, 503, 504])
    def test_it_is_unknown_and_waits_the_in_flight_bound(self, sandbox, lookups, monkeypatch, settings, status):
        settings.HELPDESK_UPSTREAM_TIMEOUT = 30
        sandbox.set_faults(error_next={"notify": 1}, error_status=status)
        before = db_now()
        effect = run_notify().effect
        effect.refresh_from_db()
        assert (effect.state, effect.answered) == (EffectState.UNKNOWN, False)
        assert f"answered {status}" in effect.last_error
        ready = reconcile_not_before(effect)
        assert ready == effect.settle_after >= before + dt.timedelta(seconds=30 + SETTLE_MARGIN_SECONDS)
        at(monkeypatch, ready - dt.timedelta(microseconds=1))
        early = effect_reconcile(effect_id=effect.pk)  # "Reconcile now" clicked at once
        assert (early.state, lookups) == (EffectState.UNKNOWN, [effect.idempotency_key])
        assert "not trusted" in early.last_reconcile
        at(monkeypatch, ready)
        effect = effect_reconcile(effect_id=effect.pk)
        assert lookups == [effect.idempotency_key] * 2
        # this 5xx recorded nothing: "not found" (now trusted) is the truth, the item may retry with the same key
        assert (effect.state, effect.verdict) == (EffectState.FAILED, Verdict.NOT_HAPPENED)

    def test_a_retry_clears_the_settle_time(self, sandbox):
        sandbox.set_faults(error_next={"notify": 1}, error_status=503)
        effect = run_notify().effect
        effect_reconcile(effect_id=settled(effect.pk))
        effect = run_notify().effect
        effect.refresh_from_db()
        assert (effect.state, effect.attempts, effect.settle_after) == (EffectState.COMMITTED, 2, None)


class TestAnAnsweredUnknownIsLookedUpAtOnce:
    def test_answered_again_on_a_retry_it_backs_off(self, sandbox):
        effect = run_notify().effect
        Effect.objects.filter(pk=effect.pk).update(state=EffectState.UNKNOWN, answered=True, attempts=2)
        effect.refresh_from_db()
        assert reconcile_not_before(effect) == effect.outcome_at, "one retry answered again: still at once"
        Effect.objects.filter(pk=effect.pk).update(attempts=4)
        effect.refresh_from_db()
        assert reconcile_not_before(effect) == effect.outcome_at + dt.timedelta(seconds=2)


class TestAnUnansweredUnknownWaitsForTheCallToEnd:
    def test_a_drop_before_any_answer_settles_after_the_in_flight_bound_but_found_commits_before(self, sandbox, lookups, monkeypatch):
        sandbox.set_faults(drop_next={"notify": 1})
        effect = run_notify().effect
        effect.refresh_from_db()
        assert (effect.state, effect.answered) == (EffectState.UNKNOWN, False)
        ready = reconcile_not_before(effect)
        assert ready == effect.settle_after
        at(monkeypatch, ready - dt.timedelta(microseconds=1))
        effect = effect_reconcile(effect_id=effect.pk)
        # the drop came after the write took effect: found -- which is safe to believe at any time --,
        # committed, nothing sent again
        assert (effect.state, effect.verdict) == (EffectState.COMMITTED, Verdict.HAPPENED)
        assert len(sandbox.deliveries(key=effect.idempotency_key)) == 1

    def test_a_timeout_waits_the_in_flight_bound(self, sandbox):
        sandbox.set_faults(latency_ms=2000)  # past the read timeout (1.5 s in the test settings)
        before = db_now()
        effect = run_notify().effect
        sandbox.clear_faults()
        effect.refresh_from_db()
        assert (effect.state, effect.answered) == (EffectState.UNKNOWN, False)
        assert reconcile_not_before(effect) == effect.settle_after >= before + dt.timedelta(
            seconds=SETTLE_MARGIN_SECONDS)


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
        client.request("POST", "/api/tickets/T-1/notify", {"x": 1}, deadline=CallDeadline.within(60))
    result = call(client, "POST", "/api/tickets/T-1/notify", {"x": 1}, deadline=CallDeadline.within(60))
    assert (result.state, result.answered) == (EffectState.UNKNOWN, True)
    assert "answered 200" in result.error
