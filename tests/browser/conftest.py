"""Playwright (sync API) driving Debian's Chromium against pytest-django's
live_server, with real worker processes doing the background work.

* No `playwright install`: the system Chromium at /usr/bin/chromium. Without
  it the browser tests skip (or fail under TICKETAGENT_REQUIRE_ALL=1).
* Playwright's sync API keeps an asyncio loop running in the main thread
  while it is alive, and Django refuses ORM calls from a thread with a
  running loop; DJANGO_ALLOW_ASYNC_UNSAFE lifts that for as long as the
  browser lives (this package only) and is put back afterwards.
* A failed test leaves a screenshot, the page's HTML and the worker logs in
  test-artifacts/ (git-ignored).
"""

import os
import re

import pytest

from tests.conftest import ROOT, skip_or_fail
from tests.fakes.openai_server import openai_server, openai_server_session  # noqa: F401 - fixtures
from tests.web.conftest import unknown_effect  # noqa: F401 - fixture

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
ARTIFACTS = ROOT / "test-artifacts"
TIMEOUT_MS = 30_000


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(scope="package")
def chromium():
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        skip_or_fail(f"no Chromium at {CHROMIUM} (apt-get install chromium); the browser tests need it")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:  # pragma: no cover - playwright is in requirements.txt
        skip_or_fail(f"playwright is not installed: {exc}")
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def _artifact_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid.split("::", 1)[-1])[:120]


@pytest.fixture
def page(chromium, transactional_db, live_server, request):
    """A fresh browser context (no cookies) on the live server.

    `page.dialogs` lists every dialog (alert, confirm, prompt) that opened:
    confirm dialogs (hx-confirm) are accepted, and a test asserts that no
    alert ever fired. Torn down before the database is flushed.
    """
    options = getattr(request, "param", None) or {}  # indirect parametrization: {"javascript": False}
    context = chromium.new_context(base_url=live_server.url, viewport={"width": 1400, "height": 1000},
                                   java_script_enabled=options.get("javascript", True))
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.dialogs = []

    def on_dialog(dialog):
        page.dialogs.append((dialog.type, dialog.message))
        dialog.accept()

    page.on("dialog", on_dialog)
    # JavaScript errors (a 4xx the test asked for also logs "Failed to load resource": not a script error)
    page.console_errors = []
    page.on("console", lambda msg: msg.type == "error" and not msg.text.startswith("Failed to load resource")
            and page.console_errors.append(msg.text))
    page.on("pageerror", lambda exc: page.console_errors.append(str(exc)))
    yield page
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        name = _artifact_name(request.node.nodeid)
        try:
            page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
            (ARTIFACTS / f"{name}.html").write_text(page.content())
        except Exception as exc:  # noqa: BLE001 - a broken page must not hide the test's own failure
            (ARTIFACTS / f"{name}.screenshot-error.txt").write_text(repr(exc))
        workers = request.node.funcargs.get("workers")
        if workers is not None:
            (ARTIFACTS / f"{name}.workers.log").write_text(workers.logs())
    context.close()


def login(page, username: str, password: str) -> None:
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"/$"))


def csrf_token(page) -> str:
    """The token htmx sends, from <body hx-headers>."""
    return page.evaluate("() => JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRFToken']")


def mark_page(page) -> None:
    """Tag the window: the tag survives htmx swaps but not a full reload."""
    page.evaluate("() => { window.__sameDocument = true; }")


def assert_same_page(page) -> None:
    assert page.evaluate("() => window.__sameDocument === true"), "the page was reloaded"


def assert_no_alerts(page) -> None:
    alerts = [d for d in page.dialogs if d[0] != "confirm"]
    assert alerts == [], f"a dialog fired: {alerts}"


from tests.deploy.stack import production_stack  # noqa: E402,F401 - fixture (test_production_stack.py)
