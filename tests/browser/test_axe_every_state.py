"""Every page of ticketagent/urls.py, in the states an operator meets mid-action, at a desk (1280 px) and on a phone
(390 px): axe-core finds nothing serious or critical, and at 390 px nothing but a table's own box scrolls sideways.

The states: first render with data in several states (a suspended task, a task needing review, a failed item, an
item held for approval, an unknown effect, a queued task, a rehearsal with a wide confusion table, a playbook with a
draft, a late and a dead worker); a page after a live (htmx) refresh brought new rows; a form answered with its
errors (the upload, the login, a playbook's import); the bulk approval answered with its error and with its result;
the product's 404.

A page added to urls.py and not walked here fails `test_every_route_is_walked_or_said_why_not`.

Before: axe found `listitem` on the bulk approval's errors (a <ul role=alert>), the rehearsal's confusion table hid
9 of its 13 columns at 390 px with nothing to say so, and an unknown address under `make run` was Django's debug
page."""

import re
import time

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from playwright.sync_api import expect
from rq import Worker

from ticketagent.llm.schemas import SCHEMA_VERSION
from ticketagent.models import Checkpoint, Item, ItemStatus, Task
from ticketagent.plan import PLAN_VERSION, STEP_NAMES
from ticketagent.playbooks.models import Playbook
from ticketagent.playbooks.services import draft_open, version_default
from ticketagent.scheduling import jobs

from ..factories import make_task
from ..web.test_rehearsal_pages import rehearsal
from .conftest import PHONE, assert_accessible, assert_fits_the_screen, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]

DESK = {"width": 1280, "height": 900}

# Routes that are no page of their own, and where what they answer is walked instead
NOT_PAGES = {
    "task-progress": "the task page's live part (walked after a live refresh)",
    "attention": "the header's live counts (every page)",
    "task-events": "a JSON Lines export",
    "playbook-export": "a YAML export",
    "rehearsal-export": "a CSV export",
    **{name: "an editor's page, walked with axe at 390 and 1280 px in tests/browser/test_playbook_working.py"
       for name in ("playbook-new", "playbook-discard", "playbook-publish")},
    "metrics": "Prometheus text", "favicon": "an icon", "healthz": "a probe", "readyz": "a probe",
    "logout": "POST only",
    **{name: "POST only: its answer is the page it was sent from (the error and bulk states walked here)"
       for name in ("upload-helpdesk", "task-resume", "task-pause", "task-cancel", "task-clone",
                    "task-move-version", "rehearsal-rerun", "go-live", "playbook-import", "playbook-draft",
                    "playbook-guidance", "playbook-categories", "playbook-rules", "playbook-reply",
                    "playbook-articles", "playbook-rename", "playbook-yaml", "item-approval",
                    "item-approvals", "item-retry", "item-skip", "effect-reconcile", "effect-review")},
}
WIDE_CATEGORIES = ["billing", "account", "shipping", "feedback", "technical", "returns", "warranty", "delivery",
                   "invoice", "privacy", "other"]


def _routes(patterns, namespace="") -> set[str]:
    names = set()
    for p in patterns:
        if isinstance(p, URLResolver):
            if p.namespace in ("admin", "django_rq"):
                continue  # Django's and django-rq's own pages
            names |= _routes(p.url_patterns, namespace)
        elif isinstance(p, URLPattern) and p.name:
            names.add(p.name)
    return names


def _waiting_for_approval(item: Item) -> None:
    """The item as a worker leaves it at a close the playbook holds for a person."""
    Checkpoint.objects.create(
        item=item, task_id=item.task_id, plan_version=PLAN_VERSION, playbook_version_id=item.playbook_version_id,
        schema_version=SCHEMA_VERSION, cursor=STEP_NAMES.index("close_ticket"), input_hash=item.input_hash(),
        step_outputs={"triage": {"category": "feedback", "priority": "normal", "sentiment": "positive",
                                 "language": "en", "summary": "Thanks; please close the ticket."},
                      "draft": {"subject": "Re: thanks", "body": "Glad we could help.", "articles": []},
                      "decide": {"actions": ["save_draft", "notify_customer", "set_status", "close_ticket"],
                                 "status": "solved", "reason": "the customer asked to close the ticket",
                                 "chosen": ["save_draft", "notify_customer", "set_status", "close_ticket"],
                                 "rules": [], "checks": [], "held": {}}})
    Item.objects.filter(pk=item.pk).update(status=ItemStatus.WAITING_APPROVAL, last_error=(
        "held for approval: close_ticket (irreversible: closing waits for an operator's approval)"))


def _silent_worker(name: str, silent_for: int) -> None:
    """A worker's registration whose sign of life is `silent_for` seconds old (late, or dead past a lease)."""
    queue = jobs.get_queue()
    worker = Worker([queue], connection=queue.connection, name=name)
    worker.register_birth()
    now = int(queue.connection.time()[0])
    queue.connection.hset(worker.key, mapping={"seen": now - silent_for, "kind": "in-process", "threads": "4"})


@pytest.fixture
def many_states(operator_world):
    world = dict(operator_world)
    more = make_task(3, name="Approvals batch", prefix="A")
    for item in more.items.all():
        _waiting_for_approval(item)
    world["held"] = more.items.order_by("row").first()
    standard = ["billing", "account", "technical", "shipping", "feedback", "other"]  # the shipped playbook's
    rows = [(f"W-{n}", (standard[n % 6], "normal", "save_draft"), (given, "normal", ["save_draft"]))
            for n, given in enumerate(WIDE_CATEGORIES, start=1)]  # 11 categories given: 13 columns in all
    world["rehearsal"] = rehearsal(rows, name="Wide rehearsal")
    world["rehearsal_2"] = rehearsal(rows[:4], name="Second rehearsal")
    version = version_default()
    world["playbook"] = version.playbook
    world["draft"] = draft_open(playbook_id=version.playbook_id)
    _silent_worker("late-worker", 12)
    _silent_worker("dead-worker", 3600)
    return world


def _pages(world) -> dict[str, tuple[str, str]]:
    """route name -> (what, url): every page, with something on it."""
    t = world
    return {
        "tasks": ("tasks", "/"),
        "upload": ("upload", "/upload/"),
        "task-detail": ("task (suspended)", f"/tasks/{t['suspended'].pk}/"),
        "task-dry-run": ("dry-run", f"/tasks/{t['suspended'].pk}/dry-run/"),
        "rehearsal": ("rehearsal (13 columns)", f"/tasks/{t['rehearsal'].pk}/rehearsal/"),
        "rehearsal-compare": ("rehearsals compared", f"/tasks/{t['rehearsal'].pk}/compare/{t['rehearsal_2'].pk}/"),
        "playbooks": ("playbooks", "/playbooks/"),
        "playbook": ("playbook", f"/playbooks/{t['playbook'].pk}/"),
        "playbook-diff": ("playbook diff", f"/playbooks/{t['playbook'].pk}/diff/"),
        "playbook-version": ("playbook draft", f"/playbooks/versions/{t['draft'].pk}/"),
        "item-detail": ("item held for approval", f"/items/{t['held'].pk}/"),
        "search": ("search", "/search/?q=example.com"),
        "review": ("review", "/review/"),
        "workers": ("workers (late, dead)", "/workers/"),
        "effect-classes": ("effect classes", "/ledger/actions/"),
        "login": ("login", "/accounts/login/"),
    }


def _more_pages(world) -> dict[str, str]:
    return {
        "task (needs review)": f"/tasks/{world['review'].pk}/",
        "task (queued)": f"/tasks/{world['running'].pk}/",
        "item (failed)": f"/items/{world['failed'].pk}/",
        "upload from the helpdesk": "/upload/?from=helpdesk",
        "search with no result": "/search/?q=nobody-at-all",
        "not found": "/no-such-page/",
        "not found (an item)": "/items/999999/",
    }


def _check(page, where: str) -> None:
    for size in (DESK, PHONE):
        page.set_viewport_size(size)
        page.wait_for_timeout(100)  # wide.js marks the boxes that scroll on resize
        assert_accessible(page, f"{where} at {size['width']} px")
        if size is PHONE:
            assert_fits_the_screen(page, f"{where} at 390 px")
    page.set_viewport_size(DESK)


def test_every_route_is_walked_or_said_why_not(db):
    walked = set(_pages({k: type("Any", (), {"pk": 1})() for k in (
        "suspended", "rehearsal", "rehearsal_2", "playbook", "draft", "held")}))
    missing = _routes(get_resolver().url_patterns) - walked - set(NOT_PAGES)
    assert not missing, f"pages no test walks with axe: {sorted(missing)}"


def test_every_page_in_every_state_has_no_serious_axe_finding_at_1280_and_390_px(page, live_server, many_states,
                                                                                alice):
    world = many_states
    page.set_viewport_size(DESK)
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("not her password")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_text("Your username and password didn't match.")).to_be_visible()
    _check(page, "login refused")
    login(page, "alice", "alice-pass-123")

    for what, url in [*_pages(world).values(), *_more_pages(world).items()]:
        if url == "/accounts/login/":
            continue
        page.goto(url)
        if what == "item held for approval":
            expect(page.locator("#d-actions .pill", has_text="held for approval")).to_have_count(1)
        _check(page, what)

    # the rehearsal's wide table says it scrolls, and the keyboard reaches it
    page.goto(f"/tasks/{world['rehearsal'].pk}/rehearsal/")
    page.set_viewport_size(PHONE)
    matrix = page.locator(".rh-matrix")
    cue = page.locator(".scroll-cue")
    expect(cue).to_be_visible()
    expect(cue).to_have_text(re.compile(r"^Scroll sideways: \d+ of 13 columns shown$"))
    shown = int(re.search(r"(\d+) of", cue.inner_text()).group(1))
    assert shown < 13
    matrix.focus()
    expect(matrix).to_be_focused()
    page.keyboard.press("End")
    for _ in range(40):
        page.keyboard.press("ArrowRight")
    expect(cue).not_to_have_text(f"Scroll sideways: {shown} of 13 columns shown")  # kept true as it scrolls
    assert matrix.evaluate("el => el.scrollLeft") > 0
    page.set_viewport_size(DESK)

    # a form answered with its errors: the upload, a playbook's import
    page.goto("/upload/")
    page.locator("input[name=file]").set_input_files(
        {"name": "bad.csv", "mimeType": "text/csv", "buffer": b"no,columns,we,know\n1,2,3,4\n"})
    page.locator("input[name=name]").fill("A bad file")
    page.get_by_role("button", name="Upload and start").click()
    expect(page.locator(".error, .errorlist").first).to_be_visible()
    _check(page, "upload refused")
    page.goto("/playbooks/")
    imports = page.locator("form[action$='/playbooks/import/']")
    if imports.count():
        imports.locator("input[type=file]").set_input_files(
            {"name": "bad.yaml", "mimeType": "application/x-yaml", "buffer": b"name: [unclosed"})
        imports.locator("button[type=submit], button:not([type])").first.click()
        expect(page.locator(".error, .errorlist").first).to_be_visible()
        _check(page, "playbook import refused")

    # the bulk approval: refused (nothing selected), then done
    page.goto("/review/")
    bulk = page.locator("#bulk-approvals")
    page.locator("#bulk-reason").fill("The customers confirmed it works")
    bulk.get_by_role("button", name="Approve selected").click()
    expect(page.locator("#bulk-errors")).to_have_text("select the items to decide first")
    _check(page, "bulk approval refused")
    page.locator(f"#pick-{world['held'].pk}").check()
    page.locator("#bulk-reason").fill("The customers confirmed it works")
    bulk.get_by_role("button", name="Approve selected").click()
    expect(page.locator("#bulk-result")).to_contain_text("Approved 1")
    _check(page, "bulk approval done")

    # after a live refresh: the Workers page's poll brings a queued task's row and a worker gone late
    page.goto("/workers/")
    late = make_task(2, name="Came in later", prefix="L")
    _silent_worker("later-late-worker", 15)
    expect(page.locator(f"#depth-{late.pk}")).to_be_visible(timeout=30_000)
    expect(page.locator("table.workers")).to_contain_text("no heartbeat for", timeout=30_000)
    _check(page, "workers after a live refresh")
    # ... and the task page's, after an item finished
    page.goto(f"/tasks/{world['running'].pk}/")
    first = world["running"].items.order_by("row").first()
    Item.objects.filter(pk=first.pk).update(status=ItemStatus.FAILED, last_error="triage: the model answered 503")
    Task.objects.filter(pk=world["running"].pk).update(status="running")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "503" not in page.content():
        page.wait_for_timeout(500)
    _check(page, "task after a live refresh")
    assert Playbook.objects.exists()
