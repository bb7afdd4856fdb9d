"""`manage.py check --database default`: the database's own settings the product relies on."""

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from ticketagent import checks

pytestmark = pytest.mark.django_db


def test_autovacuum_off_is_a_warning_naming_the_setting(monkeypatch):
    monkeypatch.setattr(checks, "_autovacuum_setting", lambda: "off")
    found = checks.autovacuum_on(databases=["default"])
    assert [w.id for w in found] == ["ticketagent.W020"] and "autovacuum off" in found[0].msg
    with pytest.raises(SystemCheckError, match="ticketagent.W020"):
        call_command("check", databases=["default"], fail_level="WARNING")


@pytest.mark.parametrize("setting", ["on", None])
def test_autovacuum_on_or_unreadable_says_nothing(monkeypatch, setting):
    monkeypatch.setattr(checks, "_autovacuum_setting", lambda: setting)
    assert checks.autovacuum_on(databases=["default"]) == []


def test_the_server_is_read_only_when_the_database_is_asked_for(monkeypatch):
    def read():
        raise AssertionError("read without --database")

    monkeypatch.setattr(checks, "_autovacuum_setting", read)
    assert checks.autovacuum_on(databases=None) == []
    assert checks._autovacuum_setting.__name__ == "read"
    monkeypatch.undo()
    assert checks._autovacuum_setting() in ("on", "off")  # the real server answers
