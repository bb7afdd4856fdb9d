"""The README's first command, as a newcomer meets it: `make run` in a fresh copy of the checkout serves the
dashboard, a 5-ticket batch uploaded through the real form reaches `completed` on the real workers, and a
terminal's Ctrl-C stops everything, nothing killed. The banner comes once the workers have said they are alive (it
said "running" 24 s before they were up), and an unknown address is the product's own 404 page (it was Django's
debug page, 466 px wide at 390).

In CI the copy runs on the venv `.ci/run` made from requirements.txt alone (TICKETAGENT_RUNTIME_VENV): a module
that needs something only the dev set installs fails here too.
"""

import csv
import io
import os
import re
import signal

import pytest

from tests.conftest import skip_or_fail

from .makerun import MakeRun

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def five_tickets() -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["ticket_id", "customer_email", "customer_name", "subject", "body"])
    for n in range(1, 6):
        writer.writerow([f"S-{n}", f"first{n}@example.com", f"Customer {n}", "Where is my order?",
                         f"Order {1000 + n} has not arrived yet. Can you check, please?"])
    return out.getvalue().encode()


@pytest.fixture
def browser():
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        skip_or_fail(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            launched = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            yield launched
            launched.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def test_make_run_in_a_fresh_checkout_serves_a_batch_to_the_end_and_stops_on_ctrl_c(tmp_path, browser):
    from playwright.sync_api import expect

    stack = MakeRun.start(tmp_path)
    try:
        page = browser.new_page(base_url=stack.url.rstrip("/"))
        # the banner waited for the workers' first heartbeat: both are alive the moment it is printed
        assert stack.banner.startswith("ticket agents are running"), stack.banner
        assert re.search(r"workers +2 of 2 up", stack.banner), stack.banner
        assert page.request.get("/readyz").json()["workers"] == 2
        page.goto("/")
        page.wait_for_url(re.compile(r"/accounts/login/"))
        page.get_by_label("Username").fill("admin")
        page.get_by_label("Password").fill(stack.password)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(re.compile(r"/$"))
        page.set_viewport_size({"width": 390, "height": 844})
        missing = page.goto("/no-such-page/")  # DEBUG is on under make run: still the product's page, not Django's
        assert missing.status == 404
        expect(page.locator("#not-found-h")).to_have_text("Not found")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        page.set_viewport_size({"width": 1280, "height": 900})
        page.goto("/")
        page.get_by_role("link", name="Upload").first.click()
        page.locator("input[name=file]").set_input_files(
            {"name": "first.csv", "mimeType": "text/csv", "buffer": five_tickets()})
        page.locator("input[name=name]").fill("First batch")
        page.get_by_role("button", name="Upload and start").click()
        page.wait_for_url(re.compile(r"/tasks/\d+/$"))
        expect(page.locator("#task-status")).to_have_text("completed", timeout=180_000)
        expect(page.locator("#percent")).to_have_text("100%")
        page.close()
    except BaseException:
        stack.stop_now()
        raise
    stack.ctrl_c()
    code = stack.wait(timeout=90)
    said = stack.stop_output()
    assert code in (0, -signal.SIGINT), said  # make itself dies of the SIGINT once run.py has stopped
    assert "killing it" not in said and "nothing killed; nothing left running" in said, said
