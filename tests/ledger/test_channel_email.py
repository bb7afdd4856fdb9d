"""How the email channel classifies what the mail server did: accepted is
committed (the key is the Message-ID); refused before or at the message is
failed; a connection lost after the message was sent is unknown, and with
no look-up by key it stays unknown for a person to review."""

import pytest

from ledger.actions import action_spec
from ledger.channels.base import CallDeadline
from ledger.models import EffectState
from ledger.services import effect_reconcile
from ticketagent.channels.smtp import EmailChannel

from ..fakes.smtp_server import ScriptedSMTPServer
from .helpers import NOTIFY, run_notify

pytestmark = pytest.mark.django_db(transaction=True)


def send_email(payload=None):
    return run_notify(payload or NOTIFY, action="notify_customer_email")


@pytest.fixture
def scripted_smtp(request, settings):
    server = ScriptedSMTPServer(mode=request.param).start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_PORT = server.port
    yield server
    server.stop()


class TestTheEmailChannel:
    def test_an_accepted_message_is_committed_under_its_message_id(self, sandbox, settings):
        result = send_email()
        effect = result.effect
        message_id = f"<{effect.idempotency_key}@{settings.MESSAGE_ID_DOMAIN}>"
        assert (result.state, effect.external_ref) == (EffectState.COMMITTED, message_id)
        [delivery] = sandbox.deliveries(key=effect.idempotency_key)
        assert delivery["endpoint"] == "email"
        assert delivery["payload"]["message_id"] == message_id

    def test_a_header_that_cannot_be_sent_is_failed_before_connecting(self, sandbox):
        bad = {**NOTIFY, "body": {**NOTIFY["body"], "subject": "Re: refund\nBcc: everyone@example.com"}}
        result = send_email(bad)
        assert result.state == EffectState.FAILED
        assert "cannot be sent" in result.effect.last_error
        assert sandbox.counts()["requests"] == 0

    def test_no_mail_server_is_failed(self, sandbox, settings):
        settings.EMAIL_PORT = 9  # nothing listens on the discard port
        result = send_email()
        assert result.state == EffectState.FAILED
        assert "could not connect to the mail server" in result.effect.last_error

    def test_a_refused_message_is_failed(self, sandbox):
        sandbox.set_faults(error_next={"email": 1})
        result = send_email()
        assert result.state == EffectState.FAILED
        assert "refused the message" in result.effect.last_error
        assert sandbox.counts()["deliveries"] == 0

    @pytest.mark.parametrize("scripted_smtp", ["refuse_recipient"], indirect=True)
    def test_a_refused_recipient_is_failed(self, scripted_smtp):
        result = send_email()
        assert result.state == EffectState.FAILED
        assert "mail server refused" in result.effect.last_error
        assert scripted_smtp.messages == []

    @pytest.mark.parametrize("scripted_smtp", ["overlong_quit"], indirect=True)
    def test_an_error_while_closing_after_acceptance_is_still_committed(self, scripted_smtp):
        result = send_email()
        assert result.state == EffectState.COMMITTED
        assert len(scripted_smtp.messages) == 1

    def test_a_connection_lost_after_sending_is_unknown_and_reconcile_cannot_tell(self, sandbox):
        sandbox.set_faults(drop_next={"email": 1})
        result = send_email()
        assert result.state == EffectState.UNKNOWN
        assert sandbox.counts()["by_endpoint"]["email"] == 1, "the message arrived before the drop"

        effect = effect_reconcile(effect_id=result.effect.pk)
        assert effect.state == EffectState.UNKNOWN and effect.resolved_by == ""
        assert effect.last_reconcile == "the email channel has no look-up by key"
        assert effect.reconciled_at is not None
        assert list(effect.transitions.values_list("to_state", flat=True)) == ["intent", "unknown", "unknown"]


class TestWhyAMessageWasNotSent:
    """A mail server's 4xx ("try again later") or no mail server at all is the mail server unavailable: the
    item waits for it. A 5xx refusal is refused; a header that cannot be sent cannot be sent as asked."""

    @staticmethod
    def cause(settings, payload=None):
        result = EmailChannel().perform(action_spec("notify_customer_email"), payload or NOTIFY, "k" * 64, CallDeadline.within(60))
        return result.state, result.cause

    def test_a_451_to_the_message_is_the_mail_server_unavailable(self, sandbox, settings):
        sandbox.set_faults(error_next={"email": 1})  # the sandbox answers 451 to the end of DATA
        assert self.cause(settings) == (EffectState.FAILED, "unavailable")

    def test_no_mail_server_is_unavailable(self, sandbox, settings):
        settings.EMAIL_PORT = 9
        assert self.cause(settings) == (EffectState.FAILED, "unavailable")

    @pytest.mark.parametrize("scripted_smtp", ["refuse_recipient"], indirect=True)
    def test_a_refused_recipient_is_refused(self, scripted_smtp, settings):
        assert self.cause(settings) == (EffectState.FAILED, "refused")

    def test_a_header_that_cannot_be_sent_is_invalid(self, sandbox, settings):
        bad = {**NOTIFY, "body": {**NOTIFY["body"], "subject": "Re: refund\nBcc: everyone@example.com"}}
        assert self.cause(settings, bad) == (EffectState.FAILED, "invalid")
