"""The model client's HTTP transport: its open connections can be cut from another thread.

A worker that is stopping must not wait for the model's answers (a local
model on a small machine takes tens of seconds for a queue of them). Cut,
a call in flight fails at once as a dropped connection (and one that opens
a connection after the cut, at once as a refused one), and the governor,
seeing the process stopping, ends the item's turn: the item is handed back
and its next attempt makes the call again (a model call is no effect).
An https endpoint's connections are cut too: the TLS stream, not the plain
one it replaced, is the one remembered.

Its reads ask for 16 KiB at a time, not httpcore's 64 KiB (`_Stream`).
"""

import socket
import threading
import weakref

import httpcore2
import httpx2

READ_BYTES = 16 * 1024  # what one read of a model's answer asks the socket for (httpcore asks for 64 KiB)


class _Stream(httpcore2.NetworkStream):
    """httpcore's stream, its reads asking for at most READ_BYTES. A read blocked on the model's answer holds
    its whole buffer for the seconds the model takes, and the few KiB that come leave the rest as a hole in the
    C heap: at 100 calls in flight, 64 KiB reads cost a worker ~20 MB of RSS (docs/benchmarks.md, figure 29).
    A model's answer still comes in a read or two."""

    def __init__(self, stream: httpcore2.NetworkStream, backend: "_RecordingBackend"):
        self._stream = stream
        self._backend = backend

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(min(max_bytes, READ_BYTES), timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, timeout)

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> "_Stream":
        # The TLS stream is a new one on a new socket (the plain one is dropped): it is the one to cut.
        return self._backend.record(self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str):
        return self._stream.get_extra_info(info)


class _RecordingBackend(httpcore2.SyncBackend):
    """httpcore's own network backend, remembering the streams it opened (a TLS stream too)."""

    def __init__(self):
        super().__init__()
        self.streams: weakref.WeakSet = weakref.WeakSet()
        self.lock = threading.Lock()
        self.cut = False

    def connect_tcp(self, *args, **kwargs):
        return self.record(super().connect_tcp(*args, **kwargs))

    def record(self, stream: httpcore2.NetworkStream) -> _Stream:
        with self.lock:
            if not self.cut:
                wrapped = _Stream(stream, self)
                self.streams.add(wrapped)
                return wrapped
        # Cut meanwhile: a call that passed its last look at the stop just before it would otherwise wait on a
        # model server that is going away with the same Ctrl-C (it may accept and never answer).
        stream.close()
        raise httpcore2.ConnectError("the connections of this process were cut: it is stopping")


class CuttableTransport(httpx2.HTTPTransport):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._backend = _RecordingBackend()
        # httpcore's pool takes its backend at construction, which httpx's transport does not pass through
        self._pool._network_backend = self._backend

    def cut(self) -> int:
        """Shut down every connection this transport opened (a blocked read returns at once), and refuse any new
        one from now on; how many were open."""
        with self._backend.lock:
            self._backend.cut = True
            streams = list(self._backend.streams)
        n = 0
        for stream in streams:
            sock = stream.get_extra_info("socket")
            if sock is None:
                continue
            try:
                sock.shutdown(socket.SHUT_RDWR)
                n += 1
            except OSError:
                pass  # already closed
        return n
