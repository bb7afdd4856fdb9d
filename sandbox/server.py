"""One sandbox process: the HTTP and SMTP listeners on shared state, run until SIGTERM or SIGINT.

:class:`SandboxServer` can also run in-process; :func:`serve` is what
``python -m sandbox`` runs: it prints the ready line ``{"http": port,
"smtp": port}`` on stdout (and nothing else, ever), logs to stderr, and exits
0 on SIGTERM/SIGINT or 2 when a port cannot be bound.
"""

from __future__ import annotations

import json
import signal
import sys
import threading

from sandbox.api import SandboxHTTPServer
from sandbox.smtp import SMTPListener
from sandbox.state import SandboxState, log

__all__ = ["SandboxServer", "serve"]


class SandboxServer:
    """Both listeners plus shared state; usable in-process too.

    >>> srv = SandboxServer(port=0, smtp_port=0).start()
    >>> srv.http_port, srv.smtp_port   # doctest: +SKIP
    >>> srv.stop()
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8025,
        smtp_port: int = 8026,
        db: str | None = None,
        honor_keys: bool = True,
        quiet: bool = False,
    ):
        self.host = host
        self.state = SandboxState(db=db, honor_keys=honor_keys, quiet=quiet)
        self._requested = (port, smtp_port)
        self.http: SandboxHTTPServer | None = None
        self.smtp: SMTPListener | None = None
        self._http_thread: threading.Thread | None = None

    def start(self) -> SandboxServer:
        port, smtp_port = self._requested
        self.http = SandboxHTTPServer((self.host, port), self.state)
        try:
            self.smtp = SMTPListener(self.host, smtp_port, self.state).start()
        except BaseException:
            self.http.server_close()
            raise
        self._http_thread = threading.Thread(
            target=self.http.serve_forever, kwargs={"poll_interval": 0.2}, name="sandbox-http", daemon=True
        )
        self._http_thread.start()
        return self

    @property
    def http_port(self) -> int:
        return self.http.server_address[1]

    @property
    def smtp_port(self) -> int:
        return self.smtp.port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.http_port}"

    def stop(self) -> None:
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
        if self._http_thread is not None:
            self._http_thread.join(timeout=5)
        if self.smtp is not None:
            self.smtp.stop()
        self.state.store.close()


def _wait_for_signal(stop: threading.Event) -> dict:
    """Route SIGTERM/SIGINT to ``stop``; returns the handlers to put back."""

    def on_signal(signum, frame):
        stop.set()

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[sig] = signal.signal(sig, on_signal)
        except ValueError:  # not in the main thread
            pass
    return previous


def serve(
    host: str = "127.0.0.1",
    port: int = 8025,
    smtp_port: int = 8026,
    db: str | None = None,
    honor_keys: bool = True,
    quiet: bool = False,
    stdout=None,
) -> int:
    """Run until SIGTERM/SIGINT; prints ``{"http": p, "smtp": p}`` first."""
    stdout = stdout or sys.stdout
    try:
        server = SandboxServer(host, port, smtp_port, db=db, honor_keys=honor_keys, quiet=quiet).start()
    except OSError as exc:
        sys.stderr.write(f"sandbox: cannot listen on {host} ({port}/{smtp_port}): {exc}\n")
        return 2
    stop = threading.Event()
    previous = _wait_for_signal(stop)
    try:
        stdout.write(json.dumps({"http": server.http_port, "smtp": server.smtp_port}) + "\n")
        stdout.flush()
        log(
            quiet,
            f"listening: http={server.url} smtp={host}:{server.smtp_port} "
            f"db={db or ':memory:'} honor_keys={honor_keys}",
        )
        while not stop.wait(0.5):
            pass
        log(quiet, "shutting down")
    finally:
        server.stop()
        for sig, handler in previous.items():
            try:
                signal.signal(sig, handler)
            except (ValueError, TypeError):
                pass
    return 0
