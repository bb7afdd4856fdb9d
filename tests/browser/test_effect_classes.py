"""The Effect classes page tells when an unknown outcome is settled: each
channel's longest call and in-flight bound (a gateway's upstream timeout),
at phone width, by keyboard and clean for axe."""

import pytest
from playwright.sync_api import expect

from .conftest import (
    PHONE,
    assert_accessible,
    assert_fits_the_screen,
    assert_keyboard_reaches_every_action,
    login,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_the_page_shows_each_channels_in_flight_bound(page, live_server, alice, settings):
    settings.HELPDESK_UPSTREAM_TIMEOUT = 60
    page.set_viewport_size(PHONE)
    login(page, "alice", "alice-pass-123")
    page.goto("/ledger/actions/")
    table = page.locator("#settle-times table")
    helpdesk = table.locator("tr", has_text="helpdesk")
    expect(helpdesk).to_contain_text("60 s")  # the in-flight bound
    expect(helpdesk).to_contain_text(f"{settings.LEASE_SECONDS + 0.5 + 1.5 + 60 + 2:g} s")
    expect(table.locator("tr", has_text="email")).to_contain_text("0 s")
    expect(page.locator("#settle-times")).to_contain_text("HELPDESK_UPSTREAM_TIMEOUT")
    assert_fits_the_screen(page, "effect classes")
    assert_accessible(page, "effect classes")
    assert_keyboard_reaches_every_action(page, "effect classes")
