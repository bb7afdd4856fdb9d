"""The model client's transport cut by a stopping worker (ticketagent/llm/transport.py), against a real TCP server
that accepts connections and never answers: a model server going away with the same Ctrl-C."""

import socket
import threading

import httpx2
import pytest

from ticketagent.llm.transport import CuttableTransport

READ_TIMEOUT = 5.0  # what a call without the cut would wait for; the checks below never need it


@pytest.fixture
def silent_server():
    """A listening socket that accepts every connection, reads its request and never answers. A connection is
    listed once its request has arrived: by then the client has surely opened it (listed at accept, a loaded
    machine could cut before the client's transport had recorded the connection it had just opened)."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted, stop = [], threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn = server.accept()[0]
                conn.settimeout(30)
                if conn.recv(65536):  # the request's first bytes
                    accepted.append(conn)
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", accepted
    stop.set()
    thread.join(timeout=5)
    for conn in accepted:
        conn.close()
    server.close()


def _client(transport):
    return httpx2.Client(transport=transport, timeout=httpx2.Timeout(READ_TIMEOUT, connect=2.0))


def test_a_call_in_flight_fails_as_a_dropped_connection_when_cut(silent_server):
    url, accepted = silent_server
    transport = CuttableTransport()
    outcome = []

    def call():
        try:
            _client(transport).post(f"{url}/v1/chat/completions", json={})
        except httpx2.HTTPError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    for _ in range(600):  # the request is sent and waits for an answer
        if accepted:
            break
        threading.Event().wait(0.05)
    assert accepted, "the call reached the server"
    assert transport.cut() == 1
    thread.join(timeout=READ_TIMEOUT + 5)
    [error] = outcome
    assert not isinstance(error, httpx2.TimeoutException), f"it waited for the read timeout: {error!r}"


def test_a_call_that_opens_a_connection_after_the_cut_is_refused_at_once(silent_server):
    """The window between an item's last look at the stop and its call: without the refusal the call waits
    for the read timeout on a server that accepted it (the Ctrl-C of `make run` waited past its grace)."""
    url, _ = silent_server
    transport = CuttableTransport()
    assert transport.cut() == 0
    with pytest.raises(httpx2.ConnectError, match="cut: it is stopping"):
        _client(transport).post(f"{url}/v1/chat/completions", json={})
