"""A helpdesk call is bounded as a whole, not per read of its socket: an answer that trickles in (a byte at a
time, each within the read timeout) ends the call at its bound as an answer that never came would -- the
worker's lease was checked for that bound, not for however long the helpdesk takes. A real local server
trickles its answer."""

import socket
import threading
import time

import pytest

from ledger.channels.base import CallDeadline
from ledger.channels.http import AnswerCut, HttpClient, NoAnswer, call
from ledger.models import EffectState

from ..conftest import wait_for

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 24\r\n\r\n"
BODY = b'{"id": "ticket-note-42"}'
GAP_SECONDS = 0.2  # between two bytes: well within the read timeout below
READ_TIMEOUT = 1.5


class Trickle:
    """Accepts one connection at a time, reads the request, answers `head` at once and then `trickled`, one
    byte every GAP_SECONDS. `finished`: how many answers were sent to the end."""

    def __init__(self, head: bytes, trickled: bytes):
        self.head, self.trickled = head, trickled
        self.finished = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                try:
                    request = b""
                    while b"\r\n\r\n" not in request:
                        request += conn.recv(65536)
                    conn.sendall(self.head)
                    for byte in self.trickled:
                        if self.stop.wait(GAP_SECONDS):
                            return
                        conn.sendall(bytes([byte]))
                    self.finished += 1
                except OSError:
                    pass  # the client gave up

    def close(self):
        self.stop.set()
        self.listener.close()


@pytest.fixture
def trickle(request):
    head, trickled = request.param
    server = Trickle(head, trickled)
    yield server
    server.close()


def client(url: str) -> HttpClient:
    return HttpClient(url, system="the helpdesk", connect_timeout=0.5, read_timeout=READ_TIMEOUT)


class TestATricklingAnswer:
    @pytest.mark.parametrize("trickle", [(b"", HEAD + BODY)], indirect=True, ids=["status-line"])
    def test_whose_status_line_trickles_is_no_answer(self, trickle):
        with pytest.raises(NoAnswer) as raised:
            client(trickle.url).request("POST", "/api/tickets/T-1/notify", {"x": 1}, deadline=CallDeadline.within(60))
        assert not isinstance(raised.value, AnswerCut)
        assert f"within {READ_TIMEOUT:.1f} s" in str(raised.value)
        assert trickle.finished == 0, "the call ended before the answer did"

    @pytest.mark.parametrize("trickle", [(HEAD, BODY)], indirect=True, ids=["body"])
    def test_whose_body_trickles_is_cut_after_its_status(self, trickle):
        with pytest.raises(AnswerCut) as raised:
            client(trickle.url).request("POST", "/api/tickets/T-1/notify", {"x": 1}, deadline=CallDeadline.within(60))
        assert raised.value.status == 200
        assert trickle.finished == 0, "the call ended before the answer did"

    @pytest.mark.parametrize("trickle", [(b"", HEAD + BODY)], indirect=True, ids=["status-line"])
    def test_makes_a_write_unknown_within_the_callers_deadline(self, trickle):
        result = call(client(trickle.url), "POST", "/api/tickets/T-1/notify", {"x": 1},
                      deadline=CallDeadline(time.monotonic() + 3 * READ_TIMEOUT))
        assert (result.state, result.answered) == (EffectState.UNKNOWN, False)
        assert trickle.finished == 0


@pytest.mark.parametrize("trickle", [(HEAD + BODY, b"")], indirect=True, ids=["prompt"])
def test_a_prompt_answer_is_read_in_full(trickle):
    answer = client(trickle.url).request("POST", "/api/tickets/T-1/notify", {"x": 1}, deadline=CallDeadline.within(60))
    assert (answer.status, answer.json(), answer.header("Content-Type")) == (
        200, {"id": "ticket-note-42"}, "application/json")
    # the server counts the answer after its last send, which the client may read first: on a busy machine, later
    wait_for(lambda: trickle.finished == 1, timeout=10, message="the server to count its answer sent to the end")
