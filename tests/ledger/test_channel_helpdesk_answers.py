"""What the helpdesk channel sends (the key with a write, the token with
every request), and how it reads answers the sandbox never gives: a write
or look-up answered without a JSON body, a 408, a 5xx look-up, a helpdesk
that cannot be reached (for the write: failed, nothing was sent; for the
look-up: it cannot tell), a TLS handshake that never completes."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ledger.actions import action_spec
from ledger.channels.base import CallDeadline
from ledger.models import EffectState
from ticketagent.channels.rest import RestHelpdeskChannel

from .helpers import NOTIFY

SPEC = action_spec("notify_customer")


class Scripted(BaseHTTPRequestHandler):
    """Answers every request with the server's (status, body)."""

    def _answer(self):
        self.server.paths.append((self.command, self.path))
        self.server.headers.append(dict(self.headers))
        status, body = self.server.answer
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def helpdesk():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    server.paths, server.headers, server.answer = [], [], (200, b"")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.channel = RestHelpdeskChannel(base_url=f"http://127.0.0.1:{server.server_address[1]}", token="")
    yield server
    server.shutdown()
    server.server_close()


class TestWhatTheHelpdeskAnswersAWrite:
    def test_a_2xx_without_a_json_body_is_committed_without_a_reference(self, helpdesk):
        helpdesk.answer = (201, b"created")
        result = helpdesk.channel.perform(SPEC, NOTIFY, "k1", CallDeadline.within(60))
        assert (result.state, result.external_ref) == (EffectState.COMMITTED, "")
        assert helpdesk.paths == [("POST", "/api/tickets/T-1/notify")]

    def test_a_408_is_unknown_not_failed(self, helpdesk):
        helpdesk.answer = (408, b"request timeout")
        result = helpdesk.channel.perform(SPEC, NOTIFY, "k1", CallDeadline.within(60))
        assert result.state == EffectState.UNKNOWN
        assert "answered 408" in result.error

    def test_a_tls_handshake_that_fails_is_failed_and_nothing_is_sent(self, helpdesk):
        channel = RestHelpdeskChannel(base_url=f"https://127.0.0.1:{helpdesk.server_address[1]}", token="")
        result = channel.perform(SPEC, NOTIFY, "k1", CallDeadline.within(60))
        assert result.state == EffectState.FAILED
        assert "could not connect" in result.error
        assert helpdesk.paths == []


class TestWhatTheHelpdeskIsSent:
    def test_the_key_with_a_write_and_the_token_with_every_request(self, helpdesk):
        channel = RestHelpdeskChannel(base_url=f"http://127.0.0.1:{helpdesk.server_address[1]}", token="hd-token-1")
        channel.perform(SPEC, NOTIFY, "k1", CallDeadline.within(60))
        channel.lookup("k1", {})
        write, lookup = helpdesk.headers
        assert (write["Idempotency-Key"], write["Authorization"]) == ("k1", "Bearer hd-token-1")
        assert "Idempotency-Key" not in lookup and lookup["Authorization"] == "Bearer hd-token-1"

    def test_no_token_no_authorization(self, helpdesk):
        helpdesk.channel.perform(SPEC, NOTIFY, "k1", CallDeadline.within(60))
        assert "Authorization" not in helpdesk.headers[0]


class TestWhatTheHelpdeskAnswersALookUp:
    def test_found_without_a_json_body_is_found_without_a_reference(self, helpdesk):
        helpdesk.answer = (200, b"yes")
        answer = helpdesk.channel.lookup("k1", {})
        assert (answer.found, answer.external_ref) == (True, "")
        assert helpdesk.paths == [("GET", "/api/lookup/k1")]

    def test_a_5xx_cannot_tell(self, helpdesk):
        helpdesk.answer = (503, b"busy")
        answer = helpdesk.channel.lookup("k1", {})
        assert (answer.found, answer.detail) == (None, "look-up answered 503")

    def test_no_helpdesk_cannot_tell(self):
        answer = RestHelpdeskChannel(base_url="http://127.0.0.1:9", token="").lookup("k1", {})
        assert answer.found is None
        assert answer.detail.startswith("look-up failed: could not connect to the helpdesk")


class TestWhyAWriteDidNotCommit:
    """A definite refusal is the helpdesk's `refused`; no connection, a 5xx, a 408 or a 429 is `unavailable`: its
    item waits for the helpdesk instead of failing."""

    @pytest.mark.parametrize("status", [400, 403, 404, 422])
    def test_a_4xx_is_refused(self, helpdesk, status):
        helpdesk.answer = (status, b'{"error": "no"}')
        result = helpdesk.channel.perform(SPEC, NOTIFY, "k1", CallDeadline.within(60))
        assert (result.state, result.cause) == (EffectState.FAILED, "refused")

    def test_a_429_was_not_processed_the_helpdesk_is_unavailable_for_now(self, helpdesk):
        helpdesk.answer = (429, b"slow down")
        result = helpdesk.channel.perform(SPEC, NOTIFY, "k1", CallDeadline.within(60))
        assert (result.state, result.cause) == (EffectState.FAILED, "unavailable")

    @pytest.mark.parametrize("status", [408, 500, 502, 503, 504])
    def test_a_5xx_or_a_408_is_unknown_and_the_helpdesk_unavailable(self, helpdesk, status):
        helpdesk.answer = (status, b"busy")
        result = helpdesk.channel.perform(SPEC, NOTIFY, "k1", CallDeadline.within(60))
        assert (result.state, result.cause) == (EffectState.UNKNOWN, "unavailable")

    def test_no_helpdesk_is_failed_and_unavailable(self):
        result = RestHelpdeskChannel(base_url="http://127.0.0.1:9", token="").perform(SPEC, NOTIFY, "k1", CallDeadline.within(60))
        assert (result.state, result.cause) == (EffectState.FAILED, "unavailable")

    def test_committed_says_no_cause(self, helpdesk):
        helpdesk.answer = (201, b'{"id": "d1"}')
        assert helpdesk.channel.perform(SPEC, NOTIFY, "k1", CallDeadline.within(60)).cause == ""


class TestTheProbe:
    """One look-up that writes nothing: any answer but a server error, a timeout or a rate limit ends a wait."""

    @pytest.mark.parametrize("status", [200, 404, 401])
    def test_an_answer_is_an_answer(self, helpdesk, status):
        helpdesk.answer = (status, b"")
        assert helpdesk.channel.probe() == ""
        assert helpdesk.paths == [("GET", "/api/lookup/0000-helpdesk-probe")]

    @pytest.mark.parametrize("status", [503, 429, 408])
    def test_a_server_error_a_timeout_or_a_rate_limit_is_not(self, helpdesk, status):
        helpdesk.answer = (status, b"")
        assert helpdesk.channel.probe() == f"the helpdesk answered {status} to a look-up"

    def test_no_helpdesk_is_not(self):
        assert RestHelpdeskChannel(base_url="http://127.0.0.1:9", token="").probe().startswith(
            "could not connect to the helpdesk")
