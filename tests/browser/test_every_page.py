"""Every page at phone width (390 px) and by keyboard, and checked by axe-core.

The pages are full of what an operator meets on a bad day: a suspended task,
a task that needs review with a failed item and a close waiting for approval,
an unknown email, a queued task. At 390 px no page scrolls sideways and every
action button is on screen (Review's Decide was at x≈1000); axe finds no
serious or critical violation; Tab reaches every link, field and button."""

import pytest
from playwright.sync_api import expect

from .conftest import (
    DESKTOP,
    PHONE,
    assert_accessible,
    assert_fits_the_screen,
    assert_keyboard_reaches_every_action,
    docs_screenshot,
    every_page,
    login,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_every_page_fits_a_phone_with_every_action_on_screen(page, live_server, operator_world, alice):
    login(page, "alice", "alice-pass-123")
    page.set_viewport_size(PHONE)
    for where, url in every_page(operator_world).items():
        page.goto(url)
        assert_fits_the_screen(page, where)
    page.goto("/review/")
    decide = page.locator(f"#effect-{operator_world['effect'].pk}").get_by_role("button", name="Decide")
    expect(decide).to_be_visible()
    box = decide.bounding_box()
    assert 0 <= box["x"] and box["x"] + box["width"] <= PHONE["width"]
    docs_screenshot(page, "phone-review")
    page.context.clear_cookies()
    page.goto("/accounts/login/")
    assert_fits_the_screen(page, "login")


def test_every_page_passes_axe_and_is_usable_by_keyboard(page, live_server, operator_world, alice):
    page.goto("/accounts/login/")
    assert_accessible(page, "login")
    login(page, "alice", "alice-pass-123")
    page.set_viewport_size(DESKTOP)
    for where, url in every_page(operator_world).items():
        page.goto(url)
        assert_accessible(page, where)
        assert_keyboard_reaches_every_action(page, where)
    page.set_viewport_size(PHONE)
    for where in ("review", "task (suspended)"):
        page.goto(every_page(operator_world)[where])
        assert_accessible(page, f"{where} at phone width")


def test_the_skip_link_is_the_first_stop_and_leads_to_the_content(page, live_server, operator_world, alice):
    login(page, "alice", "alice-pass-123")
    page.goto("/review/")
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    expect(skip).to_be_visible()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()
    page.keyboard.press("Tab")  # the next stop is inside the page's content, past the header
    assert page.evaluate("() => document.querySelector('main').contains(document.activeElement)")
