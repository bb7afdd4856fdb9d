"""Every outcome text a channel returns is redacted: configured secrets
(plain, or the password inside a URL setting, also percent-decoded), the
database password, and anything that looks like a credential."""

import pytest

from ledger.channels.base import CallResult, LookupResult
from ledger.channels.redact import REDACTED, redact, secret_values


@pytest.fixture
def secrets(settings, monkeypatch):
    settings.HELPDESK_TOKEN = "hd-token-123456"
    settings.EMAIL_HOST_PASSWORD = ""
    settings.HELPDESK_URL = "https://agent:p%40ss-word-99@helpdesk.example"
    settings.SECRET_SETTINGS = ("NOT_A_STRING", "BROKEN_URL", "PLAIN_URL", "SHORT")
    settings.NOT_A_STRING = 1234567
    settings.BROKEN_URL = "http://[::1"
    settings.PLAIN_URL = "https://helpdesk.example/api"
    settings.SHORT = "abc"
    monkeypatch.setitem(settings.DATABASES["default"], "PASSWORD", "db-pass-777")
    return settings


class TestSecretRedaction:
    def test_the_configured_secrets_are_found_longest_first(self, secrets):
        assert secret_values() == ["hd-token-123456", "p%40ss-word-99", "p@ss-word-99", "db-pass-777"]

    def test_every_configured_secret_is_replaced(self, secrets):
        text = "token hd-token-123456, url password p@ss-word-99 or p%40ss-word-99, db db-pass-777, abc"
        assert redact(text) == f"token {REDACTED}, url password {REDACTED} or {REDACTED}, db {REDACTED}, abc"

    @pytest.mark.parametrize("text, expected", [
        ("Authorization: Bearer abc.def", f"Authorization: {REDACTED}"),
        ('{"authorization": "Basic dXNlcjpwYXNz"}', f'{{"authorization": "{REDACTED}"}}'),
        ("got bearer abcdef123456 back", f"got Bearer {REDACTED} back"),
        ("key sk-abcdefghijklmnop1234", f"key {REDACTED}"),
        ("smtp://mailer:hunter2@mail.example", f"smtp://mailer:{REDACTED}@mail.example"),
        ("nothing secret here", "nothing secret here"),
    ])
    def test_credential_looking_text_is_replaced(self, secrets, text, expected):
        assert redact(text) == expected

    @pytest.mark.parametrize("value", ["", None])
    def test_no_text_stays_as_it_is(self, value):
        assert redact(value) == value

    def test_channel_answers_are_redacted_when_made(self, secrets):
        result = CallResult("unknown", external_ref="ref hd-token-123456", error="echo hd-token-123456")
        answer = LookupResult(None, external_ref="hd-token-123456", detail="saw db-pass-777")
        assert (result.external_ref, result.error) == (f"ref {REDACTED}", f"echo {REDACTED}")
        assert (answer.external_ref, answer.detail) == (REDACTED, f"saw {REDACTED}")
