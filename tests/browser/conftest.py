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
# How long an assertion on a page waits for it to become true: the live views poll every 2 s, and a worker's
# closing step (the task's status after its last item) lands a poll later; Playwright's 5 s is one or two polls.
EXPECT_TIMEOUT_MS = 15_000


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def _record_console_error(errors: list, msg) -> None:
    """A script error, in the order the page logged it. Not recorded: a 4xx the test asked for ("Failed to load
    resource") and a live view's request the browser abandoned because the test went to another page (htmx logs
    "htmx:afterRequest" then "htmx:sendAbort" for it; an aborted request is no script error, and a failed one still
    shows as "htmx:afterRequest" followed by "htmx:sendError" or "htmx:responseError")."""
    if msg.type != "error" or msg.text.startswith("Failed to load resource"):
        return
    if msg.text.startswith("htmx:sendAbort"):
        if errors and errors[-1].startswith("htmx:afterRequest"):
            errors.pop()
        return
    errors.append(msg.text)


@pytest.fixture(scope="package")
def chromium():
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        skip_or_fail(f"no Chromium at {CHROMIUM} (apt-get install chromium); the browser tests need it")
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError as exc:  # pragma: no cover - playwright is in requirements.txt
        skip_or_fail(f"playwright is not installed: {exc}")
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
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
    page.on("console", lambda msg: _record_console_error(page.console_errors, msg))
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


# --------------------------------------------------------------------------- what every page must be

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1400, "height": 1000}
SERIOUS = ("serious", "critical")
ACTIONS = "button, a.button, input[type=submit]"
DOCS_IMG = ROOT / "docs" / "img"


def assert_fits_the_screen(page, where: str = "") -> None:
    """No sideways scroll (the document is no wider than the window), and every
    visible action button lies within the window's width."""
    found = page.evaluate("""(selector) => {
        const width = window.innerWidth;
        const off = [];
        for (const el of document.querySelectorAll(selector)) {
            const r = el.getBoundingClientRect();
            if (!r.width || !r.height || getComputedStyle(el).visibility === "hidden") continue;
            if (r.left < -0.5 || r.right > width + 0.5) off.push(`${el.textContent.trim()} at x=${Math.round(r.left)}..${Math.round(r.right)}`);
        }
        return {scroll: document.documentElement.scrollWidth, width, off};
    }""", ACTIONS)
    assert found["scroll"] <= found["width"], f"{where}: the page is {found['scroll']} px wide in a {found['width']} px window"
    assert not found["off"], f"{where}: action buttons off screen: {found['off']}"


def assert_accessible(page, where: str = "") -> None:
    """axe-core (bundled with axe-playwright-python, nothing downloads): no serious or critical violation."""
    from axe_playwright_python.sync_playwright import Axe

    violations = Axe().run(page).response["violations"]
    bad = [f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:4]}"
           for v in violations if v["impact"] in SERIOUS]
    assert not bad, f"{where}: " + "\n".join(bad)


def assert_keyboard_reaches_every_action(page, where: str = "") -> None:
    """Tab from the top of the page: every visible button, link and form field gets the focus in turn."""
    total = page.evaluate("""() => {
        let n = 0;
        for (const el of document.querySelectorAll("a[href], button, input:not([type=hidden]), select, textarea, details > summary")) {
            const r = el.getBoundingClientRect();
            if (!r.width || !r.height || el.disabled) continue;
            el.dataset.kbd = String(n++);
        }
        window.__kbdSeen = new Set();
        document.addEventListener("focusin", (e) => { if (e.target.dataset && e.target.dataset.kbd) window.__kbdSeen.add(e.target.dataset.kbd); });
        document.activeElement && document.activeElement.blur();
        return n;
    }""")
    for _ in range(total + 2):
        page.keyboard.press("Tab")
    missed = page.evaluate("""() => [...document.querySelectorAll("[data-kbd]")]
        .filter((el) => !window.__kbdSeen.has(el.dataset.kbd))
        .map((el) => el.outerHTML.slice(0, 120))""")
    assert not missed, f"{where}: not reachable by keyboard: {missed}"


def docs_screenshot(target, name: str) -> None:
    """With DOCS_SCREENSHOTS=1 a test saves what it sees for docs/operator-guide.md (docs/img/NAME.png)."""
    if os.environ.get("DOCS_SCREENSHOTS") != "1":
        return
    DOCS_IMG.mkdir(parents=True, exist_ok=True)
    target.screenshot(path=str(DOCS_IMG / f"{name}.png"))


@pytest.fixture
def operator_world(unknown_effect, queue):  # noqa: F811 - the fixture imported above
    """Something on every page that needs a person, made by the real services (no workers run):
    a suspended task, a task that needs review (a failed item, a close waiting for approval),
    an unknown email, and a queued task."""
    from django.utils import timezone

    from ticketagent.llm.schemas import SCHEMA_VERSION
    from ticketagent.models import Checkpoint, Item, ItemStatus, Task, TaskStatus
    from ticketagent.plan import PLAN_VERSION, STEP_NAMES

    from ..factories import make_task

    now = timezone.now()
    suspended = make_task(6, name="Suspended batch")
    rows = list(suspended.items.order_by("row"))
    Item.objects.filter(pk=rows[0].pk).update(status=ItemStatus.DONE, finished_at=now)
    Item.objects.filter(pk__in=[i.pk for i in rows[1:4]]).update(
        status=ItemStatus.FAILED, finished_at=now, last_error="triage: the model server answered 503")
    Task.objects.filter(pk=suspended.pk).update(
        status=TaskStatus.SUSPENDED, consecutive_failures=3, last_success_item=rows[0], started_at=now,
        status_reason="3 consecutive failures: model server error")
    review = make_task(3, name="Needs review batch", prefix="R")
    failed, waiting, done = review.items.order_by("row")
    Item.objects.filter(pk=failed.pk).update(status=ItemStatus.FAILED, finished_at=now,
                                             last_error="save_draft: helpdesk refused with 422: body too long")
    Item.objects.filter(pk=waiting.pk).update(
        status=ItemStatus.WAITING_APPROVAL,
        last_error="held for approval: close_ticket (irreversible: closing waits for an operator's approval)")
    Checkpoint.objects.create(  # its decision: answered, and the customer asked to close the ticket
        item=waiting, task=review, plan_version=PLAN_VERSION, playbook_version_id=waiting.playbook_version_id,
        schema_version=SCHEMA_VERSION, cursor=STEP_NAMES.index("close_ticket"), input_hash=waiting.input_hash(),
        step_outputs={"triage": {"category": "feedback", "priority": "normal", "sentiment": "positive",
                                 "language": "en", "summary": "Thanks; please close the ticket."},
                      "draft": {"subject": "Re: thanks", "body": "Glad we could help. We close the ticket now.",
                                "articles": []},
                      "decide": {"actions": ["save_draft", "notify_customer", "set_status", "close_ticket"],
                                 "status": "solved", "reason": "the customer asked to close the ticket",
                                 "chosen": ["save_draft", "notify_customer", "set_status", "close_ticket"],
                                 "rules": [], "checks": [], "held": {}}})
    Item.objects.filter(pk=done.pk).update(status=ItemStatus.DONE, finished_at=now)
    Task.objects.filter(pk=review.pk).update(status=TaskStatus.NEEDS_REVIEW, started_at=now, finished_at=now)
    effect = unknown_effect(make_task(1, name="Email batch", notify_channel="email", prefix="M"), channel="email")
    running = make_task(2, name="Queued batch", prefix="Q")
    return {"suspended": suspended, "review": review, "failed": failed, "waiting": waiting, "effect": effect,
            "running": running}


def every_page(world) -> dict[str, str]:
    """Every page an operator opens, with something on it."""
    return {
        "tasks": "/", "upload": "/upload/", "upload from the helpdesk": "/upload/?from=helpdesk",
        "task (suspended)": f"/tasks/{world['suspended'].pk}/",
        "dry-run": f"/tasks/{world['suspended'].pk}/dry-run/",
        "task (needs review)": f"/tasks/{world['review'].pk}/",
        "review": "/review/", "item": f"/items/{world['failed'].pk}/",
        "search": "/search/?q=R-1", "workers": "/workers/", "effect classes": "/ledger/actions/",
    }


from tests.deploy.stack import production_stack  # noqa: E402,F401 - fixture (test_production_stack.py)
