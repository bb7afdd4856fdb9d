"""Email through Django's mail framework (SMTP): the key becomes the `Message-ID`; SMTP has no look-up.

A message the server accepted is committed; a refusal of the sender, a
recipient or the message is failed; a connection lost while sending is
unknown, and without a look-up its unknowns go to review with the evidence.
"""

import smtplib

from django.conf import settings
from django.core.mail import BadHeaderError, EmailMessage, get_connection

from ledger.channels.base import Abilities, CallResult, Channel
from ledger.models import EffectState


class EmailChannel(Channel):
    """SMTP through Django's mail framework."""

    name = "email"
    label = "email (SMTP)"
    abilities = Abilities(key_carried="Message-ID header", honours_key=False, lookup="")

    @property
    def max_call_seconds(self) -> float:
        return float(settings.EMAIL_TIMEOUT) * 2

    def perform(self, spec, payload, key):
        body = payload["body"]
        message = EmailMessage(
            subject=body["subject"], body=body["body"], from_email=settings.DEFAULT_FROM_EMAIL,
            to=[body["to"]], headers={"Message-ID": f"<{key}@{settings.MESSAGE_ID_DOMAIN}>",
                                      "X-Ticket": str(payload.get("ticket", ""))},
        )
        try:
            message.message()  # a header that cannot be sent fails here, before anything leaves
        except (BadHeaderError, ValueError) as exc:
            return CallResult(EffectState.FAILED, error=f"the message cannot be sent: {exc}")
        connection = get_connection(fail_silently=False, timeout=settings.EMAIL_TIMEOUT)
        try:
            connection.open()
        except OSError as exc:
            return CallResult(EffectState.FAILED, error=f"could not connect to the mail server: {exc}")
        try:
            connection.send_messages([message])
        except (smtplib.SMTPRecipientsRefused, smtplib.SMTPSenderRefused) as exc:
            return CallResult(EffectState.FAILED, error=f"mail server refused: {exc}", answered=True)
        except smtplib.SMTPDataError as exc:
            # The server answered the message with an error code: not accepted.
            return CallResult(EffectState.FAILED, error=f"mail server refused the message: {exc}", answered=True)
        except (TimeoutError, OSError, smtplib.SMTPException) as exc:
            return CallResult(EffectState.UNKNOWN, error=f"{type(exc).__name__} while sending: {exc}")
        finally:
            try:
                connection.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
        return CallResult(EffectState.COMMITTED, external_ref=f"<{key}@{settings.MESSAGE_ID_DOMAIN}>", answered=True)

    def check(self):
        connection = get_connection(fail_silently=False, timeout=settings.EMAIL_TIMEOUT)
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
