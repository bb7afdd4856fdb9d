"""ops/gateway.py: a chosen write is answered 504 and still reaches the helpdesk seconds later; the rest passes."""

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ops.gateway import Gateway


class Recorder(BaseHTTPRequestHandler):
    """The upstream: records each request, answers 201 with a JSON body."""

    received: list

    def log_message(self, *args):
        pass

    def _any(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.received.append({"method": self.command, "path": self.path, "body": body, "at": time.monotonic(),
                              "key": self.headers.get("Idempotency-Key"), "host": self.headers.get("Host")})
        answer = json.dumps({"id": len(self.received)}).encode()
        self.send_response(201 if self.command == "POST" else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_GET = do_POST = do_PUT = _any


@pytest.fixture
def upstream():
    received = []
    handler = type("Handler", (Recorder,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api", received
    server.shutdown()
    server.server_close()


def _call(url: str, method: str, body: bytes | None = None):
    request = urllib.request.Request(url, data=body, method=method, headers={"Idempotency-Key": "k-1",
                                                                             "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_a_chosen_write_is_answered_504_and_delivered_after_it(upstream):
    url, received = upstream
    gateway = Gateway(url, write_share=1.0, answer_after=0.5, deliver_after=1.0)
    base = gateway.start()
    assert base.endswith("/api") and base != url
    started = time.monotonic()
    status, body = _call(base + "/tickets/T1/notes", "POST", b'{"text": "hello"}')
    assert status == 504 and b"Gateway Time-out" in body
    assert time.monotonic() - started >= 0.5
    assert received == []  # nothing has reached the helpdesk when the client is told 504
    gateway.close()  # waits for the late delivery
    assert len(received) == 1
    late = received[0]
    assert (late["method"], late["path"], late["body"], late["key"]) == \
           ("POST", "/api/tickets/T1/notes", b'{"text": "hello"}', "k-1")
    assert late["at"] - started >= 1.5
    assert late["host"] == url.split("/")[2]
    assert gateway.counts["504"] == 1 and gateway.counts["delivered late"] == 1
    assert gateway.events[-1]["status"] == 201


def test_reads_and_writes_not_chosen_pass_through(upstream):
    url, received = upstream
    with Gateway(url, write_share=1.0) as gateway:
        base = f"http://127.0.0.1:{gateway.port}/api"
        assert _call(base + "/lookup/k-1", "GET") == (200, b'{"id": 1}')
    with Gateway(url, write_share=0.0) as gateway:
        base = f"http://127.0.0.1:{gateway.port}/api"
        assert _call(base + "/tickets/T2/notes", "POST", b"{}") == (201, b'{"id": 2}')
    assert [r["method"] for r in received] == ["GET", "POST"]
    assert gateway.counts == {"passed": 1}


def test_the_share_is_drawn_per_write_from_the_seed(upstream):
    url, received = upstream
    gateway = Gateway(url, write_share=0.5, answer_after=0.0, deliver_after=0.0, seed=3)
    base = gateway.start()
    statuses = [_call(base + f"/tickets/T{i}/notes", "POST", b"{}")[0] for i in range(20)]
    gateway.close()
    assert set(statuses) == {201, 504} and statuses.count(504) == gateway.counts["504"]
    assert len(received) == 20  # every write reached the helpdesk, answered or not


def test_paths_narrow_the_choice_to_the_writes_they_end(upstream):
    url, received = upstream
    with Gateway(url, write_share=1.0, answer_after=0.0, deliver_after=0.0, paths=("/notify",)) as gateway:
        base = f"http://127.0.0.1:{gateway.port}/api"
        assert _call(base + "/tickets/T1/draft", "PUT", b"{}")[0] == 200
        assert _call(base + "/tickets/T1/notify?x=1", "POST", b"{}")[0] == 504
    assert gateway.counts == {"passed": 1, "504": 1, "delivered late": 1}
    assert [r["path"] for r in received] == ["/api/tickets/T1/draft", "/api/tickets/T1/notify?x=1"]
    with pytest.raises(ValueError, match="must be a tuple of path endings"):
        Gateway(url, paths="/notify")


@pytest.mark.parametrize("upstream_url, share, message", [
    ("https://rt.example/", 0.1, "must be an http:// URL"),
    ("http://127.0.0.1:1/", 1.5, "between 0 and 1"),
])
def test_bad_settings_are_refused_with_what_is_wrong(upstream_url, share, message):
    with pytest.raises(ValueError, match=message):
        Gateway(upstream_url, write_share=share)


def test_a_share_of_reads_fails_in_turn_as_503_closed_and_stalled_and_none_reaches_the_helpdesk(upstream):
    url, received = upstream
    with Gateway(url, write_share=0.0, read_share=1.0, read_stall_seconds=5, seed=3) as gateway:
        base = f"http://127.0.0.1:{gateway.port}/api"
        assert _call(f"{base}/lookup/k", "GET")[0] == 503
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # closed without an answer
            _call(f"{base}/lookup/k", "GET")
        request = urllib.request.Request(f"{base}/lookup/k", method="GET")
        with pytest.raises((TimeoutError, urllib.error.URLError)):  # no answer: the client gives up
            urllib.request.urlopen(request, timeout=1)
        assert _call(f"{base}/notify", "POST", b"{}")[0] == 201, "writes pass"
    assert [r["method"] for r in received] == ["POST"], "no faulted read reached the helpdesk"
    assert (gateway.counts["read 503"], gateway.counts["read close"], gateway.counts["read stall"]) == (1, 1, 1)


def test_without_a_read_share_reads_pass_and_draw_nothing(upstream):
    url, received = upstream
    gateway = Gateway(url, write_share=0.5, seed=9)
    state = gateway.rng.getstate()
    with gateway:
        assert _call(f"http://127.0.0.1:{gateway.port}/api/lookup/k", "GET")[0] == 200
    assert gateway.rng.getstate() == state, "a seed's run without read faults stays what it was"
