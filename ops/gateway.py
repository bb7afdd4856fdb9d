"""An HTTP gateway in front of a helpdesk that, on a share of writes, answers 504 and delivers the request later.

What nginx or Apache in front of a slow upstream do: the client is told
"504 Gateway Time-out" after `answer_after` seconds, and the request still
reaches the helpdesk, `deliver_after` seconds after that answer, where it is
processed as any other (its answer thrown away). Reads (GET, HEAD, OPTIONS)
and the writes not chosen pass straight through. `paths` narrows the choice
to writes whose path ends with one of them (`("/notify",)`: only the replies).

With `read_share`, that share of reads never reaches the helpdesk and gets,
in turn, a 503, a connection closed without an answer, or no answer at all
until the client gives up (`read_stall_seconds` at most): a helpdesk behind a
busy proxy, whose reads fail now and then.

    gateway = Gateway("http://127.0.0.1:8025", write_share=0.15, seed=7)
    url = gateway.start()          # the upstream's URL with the gateway's origin (same path)
    ...
    gateway.close()                # waits for the late deliveries still pending
    gateway.counts                 # passed, 504, delivered late, ...

    python -m ops.gateway --upstream http://127.0.0.1:8025 --port 8030 --share 0.15
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import random
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, urlunsplit

WRITES = ("POST", "PUT", "PATCH", "DELETE")
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
              "transfer-encoding", "upgrade", "host", "content-length"}
TIMEOUT_PAGE = (b"<html>\r\n<head><title>504 Gateway Time-out</title></head>\r\n<body>\r\n<center>"
                b"<h1>504 Gateway Time-out</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        """A client that hung up (a worker killed mid-request) is no error of the gateway's."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Gateway:
    """The gateway: a threaded HTTP server on 127.0.0.1 forwarding to `upstream`."""

    def __init__(self, upstream: str, *, write_share: float = 0.15, answer_after: float = 1.0,
                 deliver_after: float = 4.0, seed: int | None = None, port: int = 0, upstream_timeout: float = 30.0,
                 paths: tuple[str, ...] = (), read_share: float = 0.0, read_stall_seconds: float = 10.0):
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"gateway: the upstream {upstream!r} must be an http:// URL with a host")
        if not 0.0 <= write_share <= 1.0:
            raise ValueError(f"gateway: write_share {write_share} must be between 0 and 1")
        self.upstream = parts
        if not 0.0 <= read_share <= 1.0:
            raise ValueError(f"gateway: read_share {read_share} must be between 0 and 1")
        self.write_share, self.answer_after, self.deliver_after = write_share, answer_after, deliver_after
        self.read_share, self.read_stall_seconds = read_share, read_stall_seconds
        self._read_faults = 0
        self.upstream_timeout = upstream_timeout
        if isinstance(paths, str):
            raise ValueError(f"gateway: paths {paths!r} must be a tuple of path endings, not one string")
        self.paths = tuple(paths)
        self.rng = random.Random(seed)
        self.counts: Counter = Counter()
        self.events: list[dict] = []  # {"at", "event", "method", "path", ["status"]}
        self._lock = threading.Lock()
        self._pending: list[threading.Thread] = []
        self._port = port
        self.server: _Server | None = None

    # -- running ---------------------------------------------------------------
    def start(self) -> str:
        """Listen and return the URL that replaces the upstream's (the gateway's origin, the upstream's path)."""
        gateway = self

        class Handler(_Handler):
            owner = gateway

        self.server = _Server(("127.0.0.1", self._port), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, name="gateway",
                         daemon=True).start()
        return urlunsplit(("http", f"127.0.0.1:{self.server.server_address[1]}", self.upstream.path, "", ""))

    @property
    def port(self) -> int:
        return self.server.server_address[1] if self.server else 0

    def close(self, wait: bool = True) -> None:
        """Stop listening; with `wait`, let the late deliveries still pending land first."""
        if wait:
            for thread in list(self._pending):
                thread.join(self.deliver_after + self.upstream_timeout + 1)
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def __enter__(self) -> Gateway:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- what a request becomes ----------------------------------------------------
    def note(self, event: str, method: str, path: str, **details) -> None:
        with self._lock:
            self.counts[event] += 1
            self.events.append({"at": time.time(), "event": event, "method": method, "path": path, **details})

    def times_out(self, method: str, path: str) -> bool:
        if method not in WRITES or (self.paths and not urlsplit(path).path.endswith(self.paths)):
            return False
        with self._lock:
            return self.rng.random() < self.write_share

    def read_fault(self, method: str) -> str:
        """What a read gets instead of its answer: "503", "close", "stall", in turn, for `read_share` of them;
        "" (it passes). No draw without a share: a seed's run without read faults stays what it was."""
        if method in WRITES or not self.read_share:
            return ""
        with self._lock:
            if self.rng.random() >= self.read_share:
                return ""
            self._read_faults += 1
            return ("503", "close", "stall")[(self._read_faults - 1) % 3]

    def forward(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes):
        """The request sent upstream: (status, headers, body)."""
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port or 80,
                                          timeout=self.upstream_timeout)
        try:
            sent = [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP]
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", self.upstream.netloc)
            for k, v in sent:
                conn.putheader(k, v)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            answer = conn.getresponse()
            return answer.status, answer.getheaders(), answer.read()
        finally:
            conn.close()

    def deliver_late(self, method: str, path: str, headers, body: bytes) -> None:
        def later():
            time.sleep(self.deliver_after)
            try:
                status, _, _ = self.forward(method, path, headers, body)
                self.note("delivered late", method, path, status=status)
            except OSError as exc:
                self.note("late delivery failed", method, path, error=str(exc))

        thread = threading.Thread(target=later, name="gateway-late", daemon=True)
        with self._lock:
            thread.start()
            self._pending = [t for t in self._pending if t.is_alive()] + [thread]


class _Handler(BaseHTTPRequestHandler):
    owner: Gateway
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def _any(self) -> None:
        gateway = self.owner
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = list(self.headers.items())
        fault = gateway.read_fault(self.command)
        if fault:
            gateway.note(f"read {fault}", self.command, self.path)
            if fault == "503":
                self._answer(503, [("Content-Type", "text/html")], b"<h1>503 Service Unavailable</h1>\r\n")
                return
            if fault == "stall":  # nothing until the client gives up (or the bound passes)
                self.connection.settimeout(gateway.read_stall_seconds)
                with contextlib.suppress(OSError):
                    while self.connection.recv(65536):
                        pass
            self.close_connection = True
            return
        if gateway.times_out(self.command, self.path):
            time.sleep(gateway.answer_after)
            gateway.note("504", self.command, self.path)
            gateway.deliver_late(self.command, self.path, headers, body)  # pending before the client hears
            self._answer(504, [("Content-Type", "text/html")], TIMEOUT_PAGE)
            return
        try:
            status, answer_headers, answer = gateway.forward(self.command, self.path, headers, body)
        except OSError as exc:
            gateway.note("upstream failed", self.command, self.path, error=str(exc))
            self._answer(502, [("Content-Type", "text/plain")], f"bad gateway: {exc}\n".encode())
            return
        gateway.note("passed", self.command, self.path, status=status)
        self._answer(status, [(k, v) for k, v in answer_headers if k.lower() not in HOP_BY_HOP], answer)

    def _answer(self, status: int, headers, body: bytes) -> None:
        with contextlib.suppress(OSError):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.gateway", description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="the helpdesk's URL (http://host:port[/path])")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--share", type=float, default=0.15, help="share of writes answered 504 (default: 0.15)")
    parser.add_argument("--answer-after", type=float, default=1.0, help="seconds before the 504 (default: 1)")
    parser.add_argument("--deliver-after", type=float, default=4.0,
                        help="seconds after the 504 until the request reaches the upstream (default: 4)")
    parser.add_argument("--read-share", type=float, default=0.0,
                        help="share of reads answered 503, closed unanswered or stalled, in turn (default: 0)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    args = parser.parse_args(argv)
    try:
        gateway = Gateway(args.upstream, write_share=args.share, answer_after=args.answer_after,
                          deliver_after=args.deliver_after, seed=args.seed, port=args.port, read_share=args.read_share)
    except ValueError as exc:
        parser.error(str(exc))
    print(gateway.start(), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        gateway.close(wait=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
