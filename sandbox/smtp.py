"""The SMTP listener: each message accepted at the end of DATA becomes an ``email`` delivery.

A plain RFC 5321 listener (no TLS, no AUTH) on the standard library's
threading TCP server, with the ``email`` faults (latency, a 451 instead of
the delivery, a connection reset after it).
"""

from __future__ import annotations

import socket
import socketserver
import time

from sandbox.faults import reset_on_close
from sandbox.messages import parse_email
from sandbox.state import SandboxState

__all__ = ["SMTP_HOSTNAME", "SandboxSMTPHandler", "SandboxSMTPServer"]

MAX_SMTP_MESSAGE = 32 * 1024 * 1024
MAX_SMTP_COMMAND = 4096
MAX_SMTP_LINE = 1024 * 1024
SMTP_HOSTNAME = "sandbox.helpdesk.test"


def _parse_path(arg: str, prefix: str) -> tuple[str | None, str]:
    """``FROM:<a@b> SIZE=1`` -> ``('a@b', 'SIZE=1')``; ``None`` if malformed."""
    if arg[: len(prefix)].upper() != prefix:
        return None, ""
    rest = arg[len(prefix) :].strip()
    if rest.startswith("<"):
        end = rest.find(">")
        if end < 0:
            return None, ""
        return rest[1:end].strip(), rest[end + 1 :].strip()
    address, _, params = rest.partition(" ")
    return address.strip(), params.strip()



class _SMTPAbort(Exception):
    """The connection was dropped on purpose; stop handling it."""


class SandboxSMTPHandler(socketserver.StreamRequestHandler):
    timeout = 120

    @property
    def state(self) -> SandboxState:
        return self.server.state  # type: ignore[attr-defined]

    def _reset_txn(self) -> None:
        self.mail_from: str | None = None
        self.rcpts: list[str] = []

    def reply(self, code: int, *lines: str) -> None:
        lines = lines or ("",)
        out = []
        for i, line in enumerate(lines):
            sep = " " if i == len(lines) - 1 else "-"
            out.append(f"{code}{sep}{line}\r\n")
        self.wfile.write("".join(out).encode("utf-8"))
        self.wfile.flush()

    def handle(self) -> None:
        self._reset_txn()
        peer = "{}:{}".format(*self.client_address[:2])
        try:
            self.reply(220, f"{SMTP_HOSTNAME} ESMTP TicketSandbox ready")
            while True:
                line = self.rfile.readline(MAX_SMTP_COMMAND + 2)
                if not line:
                    return
                if not line.endswith(b"\n") and len(line) > MAX_SMTP_COMMAND:
                    self.reply(500, "5.5.2 Line too long")
                    return
                text = line.decode("utf-8", "replace").rstrip("\r\n")
                verb, _, arg = text.partition(" ")
                verb = verb.upper()
                handler = (
                    getattr(self, f"smtp_{verb}", None) if verb.isalpha() else None
                )
                if handler is None:
                    self.reply(500, "5.5.2 Command not recognized")
                    continue
                if handler(arg.strip()) is False:
                    return
        except _SMTPAbort:
            return
        except (OSError, ValueError) as exc:
            self.state.log(f"smtp {peer} connection error: {exc!r}")

    # -- commands ----------------------------------------------------------------
    def smtp_EHLO(self, arg):
        if not arg:
            self.reply(501, "5.5.4 Syntax: EHLO hostname")
            return
        self._reset_txn()
        self.reply(
            250,
            f"{SMTP_HOSTNAME} Hello {arg}",
            f"SIZE {MAX_SMTP_MESSAGE}",
            "8BITMIME",
            "SMTPUTF8",
            "HELP",
        )

    def smtp_HELO(self, arg):
        if not arg:
            self.reply(501, "5.5.4 Syntax: HELO hostname")
            return
        self._reset_txn()
        self.reply(250, f"{SMTP_HOSTNAME} Hello {arg}")

    def smtp_MAIL(self, arg):
        if self.mail_from is not None:
            self.reply(503, "5.5.1 Error: nested MAIL command")
            return
        address, _params = _parse_path(arg, "FROM:")
        if address is None:
            self.reply(501, "5.5.4 Syntax: MAIL FROM:<address>")
            return
        self.mail_from = address
        self.reply(250, "2.1.0 OK")

    def smtp_RCPT(self, arg):
        if self.mail_from is None:
            self.reply(503, "5.5.1 Error: need MAIL command")
            return
        address, _params = _parse_path(arg, "TO:")
        if not address:
            self.reply(501, "5.5.4 Syntax: RCPT TO:<address>")
            return
        self.rcpts.append(address)
        self.reply(250, "2.1.5 OK")

    def smtp_RSET(self, arg):
        self._reset_txn()
        self.reply(250, "2.0.0 OK")

    def smtp_NOOP(self, arg):
        self.reply(250, "2.0.0 OK")

    def smtp_VRFY(self, arg):
        self.reply(252, "2.0.0 Cannot VRFY user, but will accept message")

    def smtp_HELP(self, arg):
        self.reply(214, "2.0.0 EHLO HELO MAIL RCPT DATA RSET NOOP QUIT")

    def smtp_QUIT(self, arg):
        self.reply(221, "2.0.0 Bye")
        return False

    def smtp_STARTTLS(self, arg):
        self.reply(502, "5.5.1 STARTTLS not supported")

    def smtp_AUTH(self, arg):
        self.reply(502, "5.5.1 AUTH not supported")

    def smtp_DATA(self, arg):
        if not self.rcpts:
            self.reply(503, "5.5.1 Error: need RCPT command")
            return
        self.reply(354, "End data with <CR><LF>.<CR><LF>")
        chunks: list[bytes] = []
        size = 0
        too_big = False
        at_line_start = True
        while True:
            line = self.rfile.readline(MAX_SMTP_LINE)
            if not line:
                return False  # client went away mid-message
            if at_line_start:
                if line in (b".\r\n", b".\n"):
                    break
                if line.startswith(b"."):
                    line = line[1:]  # dot-unstuffing
            at_line_start = line.endswith(b"\n")
            size += len(line)
            if size > MAX_SMTP_MESSAGE:
                too_big = True
            elif not too_big:
                chunks.append(line)
        if too_big:
            self._reset_txn()
            self.reply(552, "5.3.4 Message too big")
            return
        return self._deliver(b"".join(chunks))

    def _deliver(self, data: bytes):
        state = self.state
        mail_from, rcpts = self.mail_from or "", list(self.rcpts)
        self._reset_txn()
        latency = state.begin_request("email")
        if latency > 0:
            time.sleep(latency)
        key, ticket, payload = parse_email(data, mail_from, rcpts)
        if state.take_error("email") is not None:
            state.log(f"smtp email key={key!r}: injected error 451")
            self.reply(451, "4.3.0 Injected fault: mail system temporarily unavailable")
            return
        delivery, replayed = state.record(
            key=key, method="SMTP", endpoint="email", ticket=ticket, payload=payload
        )
        state.log(
            f"smtp email to={rcpts} key={key!r} -> {delivery['id']}"
            + (" (replayed, not recorded)" if replayed else "")
        )
        if state.take_drop("email"):
            state.log(f"smtp DROP email {delivery['id']} (connection reset)")
            reset_on_close(self.connection)
            try:
                self.connection.close()
            except OSError:
                pass
            try:
                self.rfile.close()
            except OSError:
                pass
            raise _SMTPAbort()
        if replayed:
            self.reply(250, f"2.0.0 OK duplicate of {delivery['id']}, not recorded")
        else:
            self.reply(250, f"2.0.0 OK queued as {delivery['id']}")


class SandboxSMTPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    block_on_close = False

    def __init__(self, address, state: SandboxState):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.state = state
        super().__init__(address, SandboxSMTPHandler)

