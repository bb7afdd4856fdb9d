"""The model client's transport cut by a stopping worker (ticketagent/llm/transport.py), against a real TCP server
that accepts connections and never answers: a model server going away with the same Ctrl-C."""

import contextlib
import gc
import shutil
import socket
import ssl
import subprocess
import threading

import httpx2
import pytest

from ticketagent.llm.transport import READ_BYTES, CuttableTransport

from ..conftest import skip_or_fail

READ_TIMEOUT = 5.0  # what a call without the cut would wait for; the checks below never need it


@contextlib.contextmanager
def _silent(scheme: str = "http", wrap=lambda conn: conn):
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
                conn = wrap(conn)
                if conn.recv(65536):  # the request's first bytes
                    accepted.append(conn)
            except (TimeoutError, ssl.SSLError):
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"{scheme}://127.0.0.1:{server.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()
        server.close()


@pytest.fixture
def silent_server():
    with _silent() as (url, accepted):
        yield url, accepted


def _client(transport):
    return httpx2.Client(transport=transport, timeout=httpx2.Timeout(READ_TIMEOUT, connect=2.0))


def _cut_while_in_flight(transport: CuttableTransport, url: str, accepted: list) -> None:
    """A call waits for the server's answer; the cut finds its one connection and the call fails at once."""
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
    gc.collect()  # a stream the connection dropped (TLS replaces the plain one) is gone for good
    assert transport.cut() == 1
    thread.join(timeout=READ_TIMEOUT + 5)
    [error] = outcome
    assert not isinstance(error, httpx2.TimeoutException), f"it waited for the read timeout: {error!r}"


def test_a_call_in_flight_fails_as_a_dropped_connection_when_cut(silent_server):
    url, accepted = silent_server
    _cut_while_in_flight(CuttableTransport(), url, accepted)


def test_a_call_that_opens_a_connection_after_the_cut_is_refused_at_once(silent_server):
    """The window between an item's last look at the stop and its call: without the refusal the call waits
    for the read timeout on a server that accepted it (the Ctrl-C of `make run` waited past its grace)."""
    url, _ = silent_server
    transport = CuttableTransport()
    assert transport.cut() == 0
    with pytest.raises(httpx2.ConnectError, match="cut: it is stopping"):
        _client(transport).post(f"{url}/v1/chat/completions", json={})


@pytest.fixture
def silent_tls_server(tmp_path):
    """The silent server over TLS (an https endpoint such as the OpenAI API's), with a certificate of its own
    for 127.0.0.1 that the client trusts."""
    if shutil.which("openssl") is None:
        skip_or_fail("the openssl command is not installed (apt-get install openssl)")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-days", "1"],
                   check=True, capture_output=True, timeout=60)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    trust = ssl.create_default_context(cafile=str(cert))
    with _silent("https", lambda conn: server_context.wrap_socket(conn, server_side=True)) as (url, accepted):
        yield url, accepted, trust


def test_an_https_call_in_flight_is_cut_too(silent_tls_server):
    """httpcore drops the plain stream once TLS is up: remembering only that one, the cut found no connection
    and a stopping worker waited for the read timeout of every call to an https model API."""
    url, accepted, trust = silent_tls_server
    _cut_while_in_flight(CuttableTransport(verify=trust), url, accepted)


def test_reads_ask_for_at_most_read_bytes_and_a_long_answer_still_arrives_whole(monkeypatch):
    """A read blocked on the model's answer holds its buffer while the model thinks: 16 KiB, not httpcore's
    64 KiB (figure 29: ~20 MB of a worker's RSS at 100 calls in flight)."""
    from httpcore2._backends.sync import SyncStream

    asked, real_read = [], SyncStream.read

    def spy(self, max_bytes, timeout=None):
        asked.append(max_bytes)
        return real_read(self, max_bytes, timeout)

    monkeypatch.setattr(SyncStream, "read", spy)
    body = b"x" * 200_000
    server = socket.create_server(("127.0.0.1", 0))

    def answer():
        conn = server.accept()[0]
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        response = _client(CuttableTransport()).get(f"http://127.0.0.1:{server.getsockname()[1]}/")
    finally:
        thread.join(timeout=10)
        server.close()
    assert response.content == body
    assert asked and max(asked) == READ_BYTES, asked[:5]
