"""smtplib's DATA with the caller's deadline asked before its end-of-data line: the one reach into smtplib.

The server accepts a message only with the line that ends its data, so
until that line leaves nothing is delivered: the deadline is asked right
before it. smtplib has no hook between the message's body and that line,
so its `data()` is written again here, with the two private helpers it
uses (`_fix_eols`, `_quote_periods`). Django's mail framework picks the
connection class from its backend's `connection_class`, so a backend that
names this one is all it takes (`mail_connection`).
"""

import functools
import smtplib

from django.conf import settings
from django.core.mail import get_connection
from django.core.mail.backends.smtp import EmailBackend as SMTPBackend
from django.utils.module_loading import import_string

from ledger.channels.base import CallDeadline


def _last_line_checked(cls):
    """`cls` (smtplib.SMTP or SMTP_SSL) whose DATA asks the caller's deadline
    right before the end-of-data line: the server accepts a message only
    with that line, so until it leaves nothing is delivered."""

    class DeadlineSMTP(cls):
        call_deadline: CallDeadline | None = None  # the call's, set once connected (`deadline_attach`)

        def data(self, msg):
            if self.call_deadline is None:
                raise TypeError("a message is sent only under the caller's deadline (perform's `deadline`)")
            self.putcmd("data")
            code, reply = self.getreply()
            if code != 354:
                raise smtplib.SMTPDataError(code, reply)
            if isinstance(msg, str):
                msg = smtplib._fix_eols(msg).encode("ascii")
            quoted = smtplib._quote_periods(msg)
            if quoted[-2:] != smtplib.bCRLF:
                quoted += smtplib.bCRLF
            self.send(quoted)
            self.call_deadline.room_to_send(float(self.timeout or 0), "the message's end of data")
            self.call_deadline.writes_sent += 1
            self.send(b"." + smtplib.bCRLF)
            return self.getreply()

    return DeadlineSMTP


_CHECKED = {cls: _last_line_checked(cls) for cls in (smtplib.SMTP, smtplib.SMTP_SSL)}


@functools.cache
def _deadline_backend(backend: type[SMTPBackend]) -> type[SMTPBackend]:
    """`backend` (Django's SMTP backend or a subclass) whose connections ask the deadline before the end of data."""

    class DeadlineBackend(backend):
        @property
        def connection_class(self):
            return _CHECKED[super().connection_class]

    return DeadlineBackend


def mail_connection(*, timeout: float):
    """A connection of the configured mail backend (not opened); an SMTP one asks the deadline before the end of
    data."""
    backend = import_string(settings.EMAIL_BACKEND)
    if isinstance(backend, type) and issubclass(backend, SMTPBackend):
        return _deadline_backend(backend)(fail_silently=False, timeout=timeout)
    return get_connection(fail_silently=False, timeout=timeout)


def deadline_attach(connection, deadline: CallDeadline) -> None:
    """Give an opened connection of `mail_connection` the call's deadline, asked before its end of data (a
    backend other than SMTP has no such line: nothing to attach)."""
    smtp = getattr(connection, "connection", None)
    if isinstance(smtp, tuple(_CHECKED.values())):
        smtp.call_deadline = deadline
