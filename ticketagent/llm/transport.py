"""The model client's HTTP transport: its open connections can be cut from another thread.

A worker that is stopping must not wait for the model's answers (a local
model on a small machine takes tens of seconds for a queue of them). Cut,
a call in flight fails at once as a dropped connection (and one that opens
a connection after the cut, at once as a refused one), and the governor,
seeing the process stopping, ends the item's turn: the item is handed back
and its next attempt makes the call again (a model call is no effect).
"""

import socket
import threading
import weakref

import httpcore2
import httpx2


class _RecordingBackend(httpcore2.SyncBackend):
    """httpcore's own network backend, remembering the streams it opened."""

    def __init__(self):
        super().__init__()
        self.streams: weakref.WeakSet = weakref.WeakSet()
        self.lock = threading.Lock()
        self.cut = False

    def connect_tcp(self, *args, **kwargs):
        stream = super().connect_tcp(*args, **kwargs)
        with self.lock:
            if not self.cut:
                self.streams.add(stream)
                return stream
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
