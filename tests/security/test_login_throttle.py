"""Failed logins are throttled per client address and per user name, and someone else's failures never
lock the account's owner out of a browser they have signed in from before.

Before: failures were counted per user name only -- one client could try any number of names (15 names,
never limited), and ten bad tries by anyone locked the owner out, correct password included, for up to 60 s.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from ticketagent.web import ratelimit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _one_window(monkeypatch):
    """A test's tries all fall in one rate-limit window: django-ratelimit's windows are fixed, each ending at a
    second of the minute of its own, and a test whose tries crossed that second counted from 0 again (200s where
    429s belonged, once on a clean clone). Its clock stands still for the test; the counters are real."""
    from django_ratelimit import core

    now = time.time()
    monkeypatch.setattr(core, "time", SimpleNamespace(time=lambda: now))


def login(client, username, password, address="198.51.100.7"):
    return client.post(reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address)


def test_one_client_trying_many_user_names_is_limited(settings, db):
    """Password spraying: the eleventh failure from one address is refused, whatever the name."""
    settings.RATE_LIMIT_LOGINS_PER_CLIENT_PER_MINUTE = 10
    sprayer = Client()
    answers = [login(sprayer, f"user{n}", "Summer2024!").status_code for n in range(15)]
    assert answers[:10] == [200] * 10
    assert answers[10:] == [429] * 5
    refused = login(sprayer, "user99", "Summer2024!")
    assert "Too many failed logins from this address" in refused.content.decode()
    assert 1 <= int(refused["Retry-After"]) <= 60
    # another client is not affected
    assert login(Client(), "user0", "Summer2024!", address="203.0.113.9").status_code == 200


def test_many_clients_guessing_one_name_are_limited(settings, alice):
    settings.RATE_LIMIT_LOGINS_PER_MINUTE = 5
    answers = [login(Client(), "alice", f"guess{n}", address=f"203.0.113.{n}").status_code for n in range(8)]
    assert answers == [200] * 5 + [429] * 3


def test_the_owner_on_a_browser_used_before_is_never_locked_out_by_someone_elses_failures(settings, alice):
    settings.RATE_LIMIT_LOGINS_PER_MINUTE = 3
    owner = Client()
    assert login(owner, "alice", "alice-pass-123", address="192.0.2.10").status_code == 302
    assert ratelimit.LOGIN_DEVICE_COOKIE in owner.cookies
    owner.post(reverse("logout"))
    attacker = Client()
    for n in range(10):
        login(attacker, "alice", f"guess{n}", address=f"203.0.113.{n}")
    assert login(attacker, "alice", "alice-pass-123", address="203.0.113.50").status_code == 429, \
        "the name is locked for every client it has not signed in from"
    # the owner's browser: correct password works, from any address (a shared office address too)
    for address in ("192.0.2.10", "203.0.113.0"):
        response = login(owner, "alice", "alice-pass-123", address=address)
        assert response.status_code == 302, response.content[:300]
        owner.post(reverse("logout"))
    # ... and its own mistakes have a budget of their own
    assert [login(owner, "alice", "typo").status_code for _ in range(4)] == [200, 200, 200, 429]
    assert "from this browser" in login(owner, "alice", "typo").content.decode()


def test_a_forged_device_cookie_counts_for_nothing(settings, alice):
    settings.RATE_LIMIT_LOGINS_PER_MINUTE = 2
    attacker = Client()
    attacker.cookies["ticketagent_login_device"] = "name-0123456789abcdef01234567:deadbeef"
    assert [login(attacker, "alice", f"g{n}").status_code for n in range(3)] == [200, 200, 429]


def test_an_administrator_can_lift_the_limit_at_once(settings, alice, capsys):
    settings.RATE_LIMIT_LOGINS_PER_MINUTE = 2
    new_browser = Client()
    for n in range(2):
        login(Client(), "alice", f"guess{n}", address=f"203.0.113.{n}")
    assert login(new_browser, "alice", "alice-pass-123").status_code == 429
    call_command("login-unlock", "Alice")
    assert "failed-login limit lifted for the user name 'Alice'" in capsys.readouterr().out
    assert login(new_browser, "alice", "alice-pass-123").status_code == 302


def test_an_administrator_can_lift_a_client_address_limit(settings, db):
    settings.RATE_LIMIT_LOGINS_PER_CLIENT_PER_MINUTE = 2
    client = Client()
    assert [login(client, f"u{n}", "x").status_code for n in range(3)] == [200, 200, 429]
    call_command("login-unlock", "--client", "198.51.100.7")
    assert login(client, "u9", "x").status_code == 200


def test_behind_a_proxy_the_forwarded_address_is_the_client(settings, db):
    settings.RATE_LIMIT_LOGINS_PER_CLIENT_PER_MINUTE = 2
    settings.TRUST_X_FORWARDED_FOR = True
    proxy = "10.0.0.2"

    def via_proxy(client_ip, spoofed=""):
        forwarded = f"{spoofed}, {client_ip}" if spoofed else client_ip
        return Client().post(reverse("login"), {"username": "u", "password": "x"}, REMOTE_ADDR=proxy,
                             HTTP_X_FORWARDED_FOR=forwarded).status_code

    assert [via_proxy("198.51.100.1", spoofed=f"1.2.3.{n}") for n in range(3)] == [200, 200, 429]
    assert via_proxy("198.51.100.2") == 200, "another client behind the same proxy is not affected"
