"""An operator goes live with a filtered subset of a rehearsal in one step, and downloads the report as CSV,
by keyboard, at 390 px and at 1280 px: 10 of 30 tickets (category account, disagreeing with the expected
labels) chosen by two selects instead of 20 ticks."""

import csv
import io
import re

import pytest
from playwright.sync_api import expect

from ticketagent.models import Task

from ..web.test_rehearsal_pages import rehearsal
from .conftest import (
    PHONE,
    assert_accessible,
    assert_fits_the_screen,
    assert_keyboard_reaches_every_action,
    assert_no_alerts,
    login,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LAPTOP = {"width": 1280, "height": 900}
MANY = [(f"M-{n:02}", ("billing", "normal", "save_draft"), ("billing" if n % 3 else "account", "normal", ["save_draft"]))
        for n in range(1, 31)]  # every third ticket was given "account": it disagrees


def press(locator, key: str = "Enter") -> None:
    locator.focus()
    expect(locator).to_be_focused()
    locator.press(key)


@pytest.mark.parametrize("screen", [PHONE, LAPTOP], ids=["390px", "1280px"])
def test_go_live_with_a_filter_and_export(page, live_server, queue, alice, screen):
    task = rehearsal(MANY, name="Thirty tickets")
    login(page, "alice", "alice-pass-123")
    page.set_viewport_size(screen)
    page.goto(f"/tasks/{task.pk}/rehearsal/")

    with page.expect_download() as download:
        press(page.locator("#export-csv"))
    text = open(download.value.path(), encoding="utf-8-sig").read()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 30 and rows[2]["Ticket"] == "M-03" and rows[2]["Category agrees"] == "no"
    assert download.value.suggested_filename == f"rehearsal-{task.pk}.csv"

    filters = page.locator("#ticket-filter")
    filters.get_by_label("Category").select_option("account")
    filters.get_by_label("Agreement").select_option("disagrees")
    press(page.locator("#filter-apply"))
    expect(page.locator("#filter-said")).to_contain_text("10 tickets are category account, disagrees on an "
                                                         "expected label")
    expect(page.locator("table.rh-tickets tbody tr")).to_have_count(10)
    assert_fits_the_screen(page, "filtered report")
    assert_accessible(page, "filtered report")
    assert_keyboard_reaches_every_action(page, "filtered report")

    press(page.get_by_role("button", name="Go live…"))
    expect(page.locator("#go-live-filter")).to_contain_text("category account, disagrees on an expected label")
    confirm = page.get_by_role("button", name="Go live with 10 tickets")
    expect(confirm).to_be_visible()
    assert_fits_the_screen(page, "go-live confirmation")
    assert_accessible(page, "go-live confirmation")
    press(confirm)
    page.wait_for_url(re.compile(r"/tasks/\d+/$"))
    live = Task.objects.get(source_task=task, rehearsal=False)
    assert sorted(live.items.values_list("ticket_id", flat=True)) == [f"M-{n:02}" for n in range(3, 31, 3)]
    assert_no_alerts(page)
    assert page.console_errors == []
