"""Email through Django's mail framework (SMTP): the key becomes the `Message-ID`; SMTP has no look-up.

A message the server accepted is committed; a refusal of the sender, a
recipient or the message is failed (a 4xx reply -- "try again later" -- says
the server is unavailable for now, a 5xx that it refused); a server that
cannot be reached is failed and unavailable; a connection lost while sending
is unknown, and without a look-up its unknowns go to review with the
evidence.
"""

import smtplib
import time

from django.conf import settings
from django.core.mail import BadHeaderError, EmailMessage

from ledger.channels.base import Abilities, CallDeadline, CallResult, Cause, Channel
from ledger.models import EffectState
from ticketagent.channels.smtplib_adapter import deadline_attach, mail_connection

CONNECT_TRIES = 3  # a mail server that cannot be reached: tried again after 0.5, 1 s


def _refusal_cause(exc: smtplib.SMTPException) -> str:
    """A reply code 4xx is SMTP's "try again later" (a full queue, greylisting): unavailable; 5xx refused."""
    codes = [code for code, _ in exc.recipients.values()] if isinstance(exc, smtplib.SMTPRecipientsRefused) \
        else [getattr(exc, "smtp_code", 500)]
    return Cause.UNAVAILABLE if codes and all(400 <= code < 500 for code in codes) else Cause.REFUSED


class EmailChannel(Channel):
    """SMTP through Django's mail framework."""

    name = "email"
    label = "email (SMTP)"
    abilities = Abilities(key_carried="Message-ID header", honours_key=False, lookup="")

    @property
    def max_call_seconds(self) -> float:
        return float(settings.EMAIL_TIMEOUT) * 2

    def perform(self, spec, payload, key, deadline):
        body = payload["body"]
        message = EmailMessage(
            subject=body["subject"], body=body["body"], from_email=settings.DEFAULT_FROM_EMAIL,
            to=[body["to"]], headers={"Message-ID": f"<{key}@{settings.MESSAGE_ID_DOMAIN}>",
                                      "X-Ticket": str(payload.get("ticket", ""))},
        )
        try:
            message.message()  # a header that cannot be sent fails here, before anything leaves
        except (BadHeaderError, ValueError) as exc:
            return CallResult(EffectState.FAILED, error=f"the message cannot be sent: {exc}", cause=Cause.INVALID)
        connection = mail_connection(timeout=settings.EMAIL_TIMEOUT)
        error, cause = self._open(connection, deadline)
        if error:
            return CallResult(EffectState.FAILED, error=f"could not connect to the mail server: {error}", cause=cause)
        deadline_attach(connection, deadline)
        try:
            connection.send_messages([message])
        except (smtplib.SMTPRecipientsRefused, smtplib.SMTPSenderRefused) as exc:
            return CallResult(EffectState.FAILED, error=f"mail server refused: {exc}", answered=True,
                              cause=_refusal_cause(exc))
        except smtplib.SMTPDataError as exc:
            # The server answered the message with an error code: not accepted.
            return CallResult(EffectState.FAILED, error=f"mail server refused the message: {exc}", answered=True,
                              cause=_refusal_cause(exc))
        except (TimeoutError, OSError, smtplib.SMTPException) as exc:
            return CallResult(EffectState.UNKNOWN, error=f"{type(exc).__name__} while sending: {exc}",
                              cause=Cause.UNAVAILABLE)
        finally:
            try:
                connection.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
        return CallResult(EffectState.COMMITTED, external_ref=f"<{key}@{settings.MESSAGE_ID_DOMAIN}>", answered=True)

    def _open(self, connection, deadline: CallDeadline) -> tuple[str, str]:
        """Open the connection, tried again with back-off while the deadline
        leaves room for the message: ("", "") once open, else the last error
        and its cause. A server that answered (its greeting or the login
        refused: a reply code, no AUTH offered) is not asked again."""
        pause = 0.5
        for tries in range(1, CONNECT_TRIES + 1):
            deadline.room_to_send(self.max_call_seconds, "the message")
            try:
                connection.open()
                return "", ""
            except smtplib.SMTPResponseException as exc:  # 421 busy: unavailable; 535 bad credentials: refused
                return f"{exc}", _refusal_cause(exc)
            except smtplib.SMTPNotSupportedError as exc:  # the settings ask for what the server does not offer
                return f"{exc}", Cause.REFUSED
            except OSError as exc:
                if tries == CONNECT_TRIES or deadline.time_left() < pause + self.max_call_seconds:
                    return f"{exc} ({tries} tries)", Cause.UNAVAILABLE
                time.sleep(pause)
                pause *= 2
        return "no try left", Cause.UNAVAILABLE

    def probe(self):
        problems = self.check()
        return problems[0] if problems else ""

    def check(self):
        connection = mail_connection(timeout=settings.EMAIL_TIMEOUT)
        try:
            connection.open()
        except (OSError, smtplib.SMTPException) as exc:
            return [f"could not connect to the mail server {settings.EMAIL_HOST}:{settings.EMAIL_PORT}: {exc}"]
        finally:
            try:
                connection.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
        return []
