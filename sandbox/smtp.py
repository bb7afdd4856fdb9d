"""The SMTP listener, on aiosmtpd: each message accepted at the end of DATA becomes an ``email`` delivery.

aiosmtpd speaks the protocol (EHLO/HELO, MAIL, RCPT, DATA with
dot-unstuffing, RSET, NOOP, VRFY, HELP, QUIT; no TLS, no AUTH); this module
adds what the sandbox does with a message: the ``email`` faults (latency, a
451 instead of the delivery, a connection reset after it) and the delivery,
keyed by the Message-ID and deduped in honor-keys mode.

The listener runs its own asyncio loop in a thread, beside the HTTP
listener's threads; both share one :class:`~sandbox.state.SandboxState`.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from aiosmtpd.controller import UnthreadedController
from aiosmtpd.smtp import SMTP, Envelope, Session

from sandbox.faults import reset_on_close
from sandbox.messages import parse_email
from sandbox.state import SandboxState

__all__ = ["MAX_SMTP_LINE", "MAX_SMTP_MESSAGE", "SMTP_HOSTNAME", "MailHandler", "SMTPListener"]

SMTP_HOSTNAME = "sandbox.helpdesk.test"
#: The greeting reads ``220 sandbox.helpdesk.test ESMTP TicketSandbox ready``.
SMTP_IDENT = "ESMTP TicketSandbox ready"
MAX_SMTP_MESSAGE = 32 * 1024 * 1024
MAX_SMTP_LINE = 1024 * 1024
IDLE_TIMEOUT = 120  # seconds without a command before the session is closed
INJECTED_ERROR = "451 4.3.0 Injected fault: mail system temporarily unavailable"


class SandboxSMTP(SMTP):
    """aiosmtpd's SMTP session, taking message lines of up to 1 MiB.

    aiosmtpd's default is RFC 5321's 1001 octets (``500 Line too long`` at the
    end of DATA); the sandbox has always accepted what a lenient helpdesk
    accepts, so a client's long line is recorded rather than refused.
    """

    line_length_limit = MAX_SMTP_LINE


class MailHandler:
    """aiosmtpd handler: applies the ``email`` faults and records the delivery."""

    def __init__(self, state: SandboxState):
        self.state = state

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        state = self.state
        generation = state.generation
        latency = state.begin_request("email")
        if latency > 0:
            await asyncio.sleep(latency)
            if state.outdated(generation, "smtp email"):
                return INJECTED_ERROR
        # aiosmtpd hands over the null reverse-path of ``MAIL FROM:<>`` as "<>".
        mail_from = "" if envelope.mail_from == "<>" else envelope.mail_from
        key, ticket, payload = parse_email(envelope.original_content or b"", mail_from, envelope.rcpt_tos)
        if state.take_error("email") is not None:
            state.log(f"smtp email key={key!r}: injected error 451")
            return INJECTED_ERROR
        # The store serialises writes under a lock (and fsyncs): off the loop.
        delivery, replayed = await asyncio.to_thread(
            state.record, key=key, method="SMTP", endpoint="email", ticket=ticket, payload=payload
        )
        state.log(
            f"smtp email to={payload['to']} key={key!r} -> {delivery['id']}"
            + (" (replayed, not recorded)" if replayed else "")
        )
        if state.take_drop("email"):
            state.log(f"smtp DROP email {delivery['id']} (connection reset)")
            _drop(server)
            return "451 4.3.0 Connection dropped"  # never sent: the transport is gone
        if replayed:
            return f"250 2.0.0 OK duplicate of {delivery['id']}, not recorded"
        return f"250 2.0.0 OK queued as {delivery['id']}"

    async def handle_exception(self, error: Exception) -> str:
        self.state.log(f"smtp error: {error!r}")
        return "451 4.3.0 Internal error, try again later"


def _drop(server: SMTP) -> None:
    """Reset the client's connection now: the delivery is recorded, the 250 never sent."""
    transport = server.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        reset_on_close(sock)
    transport.abort()


class _Controller(UnthreadedController):
    def factory(self) -> SMTP:
        return SandboxSMTP(self.handler, **self.SMTP_kwargs)


class _LogBridge(logging.Handler):
    """aiosmtpd's warnings and errors, onto the sandbox's own log lines."""

    def __init__(self, state: SandboxState):
        super().__init__(logging.WARNING)
        self.state = state

    def emit(self, record: logging.LogRecord) -> None:
        self.state.log(f"smtp {record.getMessage()}")


class SMTPListener:
    """aiosmtpd on ``(host, port)``, its asyncio loop running in a daemon thread.

    ``port`` 0 picks a free port; :attr:`port` is the bound one. Binding
    happens in the constructor, so a taken port raises ``OSError`` there.
    """

    def __init__(self, host: str, port: int, state: SandboxState):
        self.loop = asyncio.new_event_loop()
        self._log_bridge = _LogBridge(state)
        self.controller = _Controller(
            MailHandler(state),
            hostname=host,
            port=port,
            loop=self.loop,
            server_hostname=SMTP_HOSTNAME,
            ident=SMTP_IDENT,
            data_size_limit=MAX_SMTP_MESSAGE,
            enable_SMTPUTF8=True,
            timeout=IDLE_TIMEOUT,
        )
        try:
            self.controller.begin()
        except BaseException:
            self.loop.close()
            raise
        self.port: int = self.controller.server.sockets[0].getsockname()[1]
        self._thread: threading.Thread | None = None

    def start(self) -> SMTPListener:
        mail_log = logging.getLogger("mail.log")
        mail_log.addHandler(self._log_bridge)
        mail_log.propagate = False
        self._thread = threading.Thread(target=self.loop.run_forever, name="sandbox-smtp", daemon=True)
        self._thread.start()
        return self

    async def _shutdown(self) -> None:
        sessions = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in sessions:
            task.cancel()
        await asyncio.gather(*sessions, return_exceptions=True)
        await self.controller.finalize()

    def stop(self) -> None:
        """Close the listener and every open session; the loop ends with them."""
        if self._thread is not None:
            future = asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop)
            try:
                future.result(timeout=5)
            finally:
                self.loop.call_soon_threadsafe(self.loop.stop)
                self._thread.join(timeout=5)
                self._thread = None
        elif self.controller.server is not None:
            self.loop.run_until_complete(self.controller.finalize())
        logging.getLogger("mail.log").removeHandler(self._log_bridge)
        if not self.loop.is_running():
            self.loop.close()
