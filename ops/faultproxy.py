"""A TCP proxy between one worker process and PostgreSQL that stalls or silently cuts its answers on command.

    proxy = FaultProxy("127.0.0.1", 5432)
    port = proxy.start()                      # listens on 127.0.0.1, a free port
    proxy.stall(20)                           # every server->client byte held 20 s, then delivered
    proxy.stall_next(b'INSERT INTO "ledger_effect"', 20)
                                              # the next chunk the client sends that contains the
                                              # pattern goes through; the answers on that connection
                                              # are held 20 s ("it committed, the worker does not know")
    proxy.drop()                              # a silent cut: nothing forwarded either way, no socket
                                              # closed, no FIN/RST; new connections accepted, never forwarded
    proxy.heal()                              # forward again; the connections cut stay dead (closed now)
    proxy.cancel_aims()                       # forget the stall_next aims not matched yet
    proxy.close()
    proxy.events, proxy.counts                # what it did, for reports

Statements reach PostgreSQL and run while their answers are held: a
stalled worker's writes commit, it just does not hear of it. A cut
connection's bytes are discarded in both directions, and a client that
gives up on one is not passed on to the server: the server's session stays
as a lost host leaves it (idle, perhaps idle in a transaction holding
locks) until `heal()` closes it. The proxy answers PostgreSQL's SSL and GSS
encryption requests itself with "no", so the statements cross it in clear
text and a pattern can be seen.

On one machine the proxy's own kernel acknowledges what the client sends,
so a cut looks to the client like a peer that stopped answering, not like a
link whose packets are lost: `tcp_user_timeout` does not fire, keepalives
are answered; the client's statement, idle or session timeouts must.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit, urlunsplit

_ENCRYPTION_REQUESTS = (80877103, 80877104)  # SSLRequest, GSSENCRequest: 8 bytes, length then code
_CHUNK = 65536


@dataclass(eq=False)
class _Link:
    """One client connection and its server connection."""

    client: socket.socket
    server: socket.socket | None
    hold_until: float = 0.0  # monotonic: the server's answers on this link are held until then
    cut: bool = False
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for sock in (self.client, self.server):
            if sock is None:
                continue
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


@dataclass
class _Aim:
    patterns: tuple[bytes, ...]  # all of them in one chunk
    seconds: float
    on_match: Callable[[], None] | None

    def hits(self, data: bytes) -> bool:
        return all(p in data for p in self.patterns)

    @property
    def text(self) -> str:
        return " + ".join(p.decode("utf-8", "replace") for p in self.patterns)


def database_server(url: str) -> tuple[str, int]:
    """The server of a libpq URL: (host, port), the host a folder for a unix socket (the private server's
    `postgres://postgres@%2Fpath%2Fto%2Fvar%2Fpostgres/ticketagent`, whose percent-encoded, case-sensitive host
    `urlsplit().hostname` would lower-case and leave encoded)."""
    server = urlsplit(url).netloc.rpartition("@")[2]
    host, colon, port = server.rpartition(":")
    if not colon or not port.isdigit() or host.endswith("["):
        host, port = server, ""
    return unquote(host.strip("[]")) or "127.0.0.1", int(port or 5432)


class FaultProxy:
    """Forwards 127.0.0.1:<port> to `target_host:target_port`, one thread per direction and connection."""

    @classmethod
    def in_front_of(cls, url: str, **kwargs) -> FaultProxy:
        """A proxy (not started) to the server of the database `url` names, over TCP or its unix socket."""
        return cls(*database_server(url), **kwargs)

    def url(self, url: str) -> str:
        """`url` with its server replaced by this (started) proxy: the same user, password and database."""
        parts = urlsplit(url)
        auth = parts.netloc.rpartition("@")[0]
        return urlunsplit((parts.scheme, f"{auth}@127.0.0.1:{self.port}" if auth else f"127.0.0.1:{self.port}",
                           parts.path, parts.query, ""))

    def __init__(self, target_host: str, target_port: int, *, connect_timeout: float = 10.0):
        self.target = (target_host, int(target_port))
        self.connect_timeout = connect_timeout
        self.port = 0
        self.events: list[dict] = []  # {"at": wall-clock time, "event": ..., and details}
        self.counts: Counter = Counter()
        self._cond = threading.Condition()
        self._stall_until = 0.0
        self._dropped = False
        self._aims: list[_Aim] = []
        self._links: list[_Link] = []
        self._listener: socket.socket | None = None
        self._closing = False

    # -- control ---------------------------------------------------------------
    def start(self) -> int:
        """Listen on a free port of 127.0.0.1 and return it."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        self._listener = listener
        self.port = listener.getsockname()[1]
        threading.Thread(target=self._accept_loop, name=f"faultproxy-{self.port}", daemon=True).start()
        return self.port

    def stall(self, seconds: float) -> None:
        """Hold every server->client byte, on every connection, for `seconds` from now."""
        with self._cond:
            self._stall_until = max(self._stall_until, time.monotonic() + seconds)
            self._note("stall", seconds=seconds)
            self._cond.notify_all()

    def stall_next(self, pattern: bytes | tuple[bytes, ...], seconds: float,
                   on_match: Callable[[], None] | None = None) -> None:
        """The next client->server chunk that contains `pattern` (or every one
        of a tuple of patterns) is forwarded, and the answers on its
        connection are held for `seconds` from then. `on_match` (optional)
        runs at that moment, before the chunk is forwarded, in the proxy's
        thread: e.g. to SIGSTOP the client."""
        patterns = (pattern,) if isinstance(pattern, bytes | bytearray) else tuple(pattern)
        if not patterns or not all(patterns):
            raise ValueError("stall_next: the pattern is empty")
        aim = _Aim(tuple(bytes(p) for p in patterns), seconds, on_match)
        with self._cond:
            self._aims.append(aim)
            self._note("aim", pattern=aim.text, seconds=seconds)

    def cancel_aims(self) -> int:
        """Forget the `stall_next` aims that have not matched yet; how many there were."""
        with self._cond:
            n, self._aims = len(self._aims), []
            if n:
                self._note("aims cancelled", count=n)
            return n

    def drop(self) -> None:
        """Cut every connection silently; connections made from now on are accepted and never forwarded."""
        with self._cond:
            self._dropped = True
            for link in self._links:
                link.cut = True
            self._note("drop", connections=len(self._links))
            self._cond.notify_all()

    def heal(self) -> None:
        """Forward again; the connections that were cut are closed now (they stay dead)."""
        with self._cond:
            self._dropped = False
            cut = [link for link in self._links if link.cut]
            self._links = [link for link in self._links if not link.cut]
            self._note("heal", closed=len(cut))
            self._cond.notify_all()
        for link in cut:
            link.close()

    def close(self) -> None:
        with self._cond:
            self._closing = True
            links, self._links = self._links, []
            self._cond.notify_all()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        for link in links:
            link.close()

    @property
    def stalled(self) -> bool:
        return time.monotonic() < self._stall_until

    def __enter__(self) -> FaultProxy:
        if not self.port:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- forwarding -------------------------------------------------------------
    def _note(self, event: str, **details) -> None:
        self.counts[event] += 1
        self.events.append({"at": time.time(), "event": event, **details})

    def _accept_loop(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._open, args=(client,), daemon=True).start()

    def _connect_target(self) -> socket.socket:
        """The server's socket: TCP, or PostgreSQL's unix socket when the host is a folder (a private server)."""
        host, port = self.target
        if str(host).startswith("/"):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.settimeout(self.connect_timeout)
            server.connect(f"{host}/.s.PGSQL.{port}")
        else:
            server = socket.create_connection(self.target, timeout=self.connect_timeout)
            server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        server.settimeout(None)
        return server

    def _open(self, client: socket.socket) -> None:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._cond:
            dropped = self._dropped
        server = None
        if not dropped:
            try:
                server = self._connect_target()
            except OSError as exc:
                self._note("connect failed", error=str(exc))
                with contextlib.suppress(OSError):
                    client.close()
                return
        link = _Link(client, server, cut=dropped)
        with self._cond:
            if self._closing:
                link.close()
                return
            self._links.append(link)
            self._note("connect", cut=dropped)
        threading.Thread(target=self._client_to_server, args=(link,), daemon=True).start()
        if server is not None:
            threading.Thread(target=self._server_to_client, args=(link,), daemon=True).start()

    def _forget(self, link: _Link) -> None:
        with self._cond:
            if link in self._links:
                self._links.remove(link)
        link.close()

    def _match(self, link: _Link, data: bytes) -> None:
        """Arm the hold of the first waiting aim whose pattern is in `data`."""
        with self._cond:
            aim = next((a for a in self._aims if a.hits(data)), None)
            if aim is None:
                return
            self._aims.remove(aim)
            link.hold_until = max(link.hold_until, time.monotonic() + aim.seconds)
            self._note("aimed stall", pattern=aim.text, seconds=aim.seconds)
        if aim.on_match is not None:
            try:
                aim.on_match()
            except Exception as exc:  # noqa: BLE001 - the caller's hook failing must not stop the forwarding
                self._note("on_match failed", error=repr(exc))

    def _client_to_server(self, link: _Link) -> None:
        first = True
        while True:
            try:
                data = link.client.recv(_CHUNK)
            except OSError:
                data = b""
            if not data:
                if not link.cut:  # a client leaving a cut link is not seen by the server
                    self._forget(link)
                return
            if link.cut:
                self.counts["bytes discarded"] += len(data)
                continue
            if first and len(data) == 8 and struct.unpack("!ii", data)[1] in _ENCRYPTION_REQUESTS:
                with contextlib.suppress(OSError):
                    link.client.sendall(b"N")  # no encryption: the statements stay readable here
                continue
            first = False
            self._match(link, data)
            try:
                link.server.sendall(data)
            except OSError:
                self._forget(link)
                return

    def _server_to_client(self, link: _Link) -> None:
        while True:
            try:
                data = link.server.recv(_CHUNK)
            except OSError:
                data = b""
            if not self._wait_until_free(link, bool(data)):
                return
            if not data:
                self._forget(link)
                return
            try:
                link.client.sendall(data)
            except OSError:
                self._forget(link)
                return

    def _wait_until_free(self, link: _Link, holding: bool) -> bool:
        """Wait out the stalls that hold this link's answers; False if the
        link is cut or the proxy closing (what was read is discarded)."""
        with self._cond:
            held = False
            while True:
                if link.cut or self._closing or link.closed:
                    return False
                wait = max(self._stall_until, link.hold_until) - time.monotonic()
                if wait <= 0:
                    break
                if holding and not held:
                    self.counts["answers held"] += 1
                    held = True
                self._cond.wait(wait)
            return True
