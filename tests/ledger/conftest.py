"""Fixtures shared by the ledger's tests."""

import pytest

from ticketagent.channels.rest import RestHelpdeskChannel


@pytest.fixture
def lookups(monkeypatch):
    """The keys the helpdesk channel was asked about (the real look-up still runs)."""
    asked = []
    real = RestHelpdeskChannel.lookup

    def lookup(self, key, payload):
        asked.append(key)
        return real(self, key, payload)

    monkeypatch.setattr(RestHelpdeskChannel, "lookup", lookup)
    return asked
