"""An HTTP proxy in front of the test RT that loses answers, for the outcomes a healthy RT never produces.

    proxy = LossyProxy(rt_server.base_url, mode="drop")   # http://127.0.0.1:<port>
    ...
    proxy.close()

Modes:
    drop       the request reaches RT; its answer is thrown away and the connection closed
    502        the request reaches RT; the client gets 502 Bad Gateway instead of RT's answer
    403        the request reaches RT; the client gets a proxy's 403 Forbidden page (HTML) instead of RT's answer
    blackhole  nothing reaches RT and nothing comes back (the client's read times out)
    503        nothing reaches RT; the client gets 503 Service Unavailable (a gateway whose upstream is away)
    flaky      every `every`-th request is faulted, in turn: 503 without reaching RT, the connection closed
               without reaching RT, the answer dropped after reaching RT; the others pass
    pass       a plain proxy

In any mode, `fault_next(fault, n, method=, path=, skip=)` faults the next `n` requests of that method whose path
matches the regular expression (after letting `skip` of them pass), none of them reaching RT: "503", "close" (closed
without an answer) or "stall" (held without an answer until the client gives up).


`select(seen)`, if given, picks the requests the mode applies to; the others pass. `seen` is every request so
far as (method, path without the query), this one last:

    # the ticket read back after its change gets a 503, everything else passes
    LossyProxy(url, mode="503", select=lambda seen: seen[-1][0] == "GET" and "PUT" in [m for m, _ in seen])

`forwarded` counts the requests that reached RT, `faulted` the requests faulted, `requests` lists them all.
"""

import http.client
import re
import socket
import threading
from urllib.parse import urlsplit


class LossyProxy:
    def __init__(self, target: str, *, mode: str, every: int = 2, select=None):
        parts = urlsplit(target)
        self.target = (parts.hostname, parts.port)
        self.mode = mode
        self.every = every
        self.select = select
        self.requests: list[tuple[str, str]] = []
        self.forwarded = self.faulted = self.seen = 0
        self.lock = threading.Lock()
        self.next_faults: list[list] = []  # [fault, count left, method, path pattern, to let pass first]
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.closed = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _read_request(self, conn):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        length = int(next((v for k, v in headers.items() if k.lower() == "content-length"), 0))
        while len(body) < length:
            body += conn.recv(65536)
        return method, path, headers, body

    def _handle(self, conn):
        with conn:
            request = self._read_request(conn)
            if request is None:
                return
            fault = self._next_fault(request[0], request[1]) or self._fault(request[0], request[1].split("?", 1)[0])
            if self.mode == "blackhole" or fault == "stall":
                while conn.recv(65536):  # hold it until the client gives up
                    pass
                return
            if fault == "503":
                conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/html\r\nContent-Length: 19"
                             b"\r\nConnection: close\r\n\r\nService Unavailable")
                return
            if fault == "close":
                return
            method, path, headers, body = request
            upstream = http.client.HTTPConnection(*self.target, timeout=30)
            headers = {k: v for k, v in headers.items() if k.lower() not in ("host", "connection")}
            upstream.request(method, path, body or None, headers)
            answer = upstream.getresponse()
            payload = answer.read()
            upstream.close()
            self.forwarded += 1
            if fault == "drop":
                return
            if fault == "502":
                conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            if fault == "403":
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/html\r\nContent-Length: 22\r\n"
                             b"Connection: close\r\n\r\n<h1>403 Forbidden</h1>")
                return
            head = f"HTTP/1.1 {answer.status} {answer.reason}\r\n"
            for key, value in answer.getheaders():
                if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                    head += f"{key}: {value}\r\n"
            head += f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
            conn.sendall(head.encode("latin-1") + payload)

    def fault_next(self, fault: str, n: int = 1, *, method: str = "GET", path: str = ".*", skip: int = 0) -> None:
        """Fault the next `n` requests of `method` whose path matches `path`, after `skip` of them
        (the faulted ones never reach RT)."""
        assert fault in ("503", "close", "stall"), fault
        with self.lock:
            self.next_faults.append([fault, n, method, re.compile(path), skip])

    def _next_fault(self, method: str, path: str) -> str:
        with self.lock:
            for entry in self.next_faults:
                fault, left, wanted, pattern, skip = entry
                if left <= 0 or method != wanted or not pattern.search(path):
                    continue
                if skip:
                    entry[4] -= 1
                    continue
                entry[1] -= 1
                self.faulted += 1
                return fault
        return ""

    def _fault(self, method: str, path: str) -> str:
        """What to do with this request instead of passing it: "503", "close" (before it reaches RT), "drop",
        "502", "403" (after it reached RT) or "" (pass it)."""
        with self.lock:
            self.requests.append((method, path))
            if self.select is not None and not self.select(list(self.requests)):
                return ""
            if self.mode in ("503", "drop", "502", "403"):
                self.faulted += 1
                return self.mode
            if self.mode != "flaky":
                return ""
            self.seen += 1
            if self.seen % self.every:
                return ""
            self.faulted += 1
            return ("503", "close", "drop")[(self.faulted - 1) % 3]

    def close(self):
        self.closed = True
        self.sock.close()
