"""A rehearsal as a team runs one: the example playbook, its labelled tickets rehearsed through the upload page
by a real worker, the agreement read off the report; the same tickets on a version 2 whose rule changed,
compared ticket by ticket; then going live with two tickets left out. The sandbox helpdesk -- a real
process -- receives nothing until the live task runs, and then only the live task's tickets."""

import csv
import io
import re

import pytest
from playwright.sync_api import expect

from ticketagent.models import Event, EventType, ItemStatus, Task, TaskStatus
from ticketagent.playbooks.files import spec_from_file
from ticketagent.playbooks.services import draft_open, draft_update, playbook_import, version_publish, version_spec

from ..conftest import ROOT
from ..web.test_rehearsal_pages import rehearsal
from .conftest import (
    DESKTOP,
    PHONE,
    assert_accessible,
    assert_fits_the_screen,
    assert_keyboard_reaches_every_action,
    assert_no_alerts,
    docs_screenshot,
    login,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PLAYBOOK = ROOT / "docs" / "examples" / "playbook-acme.yaml"
TICKETS = ROOT / "docs" / "examples" / "rehearsal-acme.csv"
NEW_RULE = {"name": "Every billing ticket goes to Billing", "when": ["category is billing"], "require": ["escalate"]}


def agreement_in_the_database(task: Task) -> dict[str, tuple[int, int]]:
    """What the report must say, counted here from the checkpoints: field -> (agree, of)."""
    counts: dict[str, list[int]] = {}
    for item in task.items.select_related("checkpoint"):
        outputs = item.checkpoint.step_outputs
        given = {"category": outputs["triage"]["category"], "priority": outputs["triage"]["priority"],
                 "actions": set(outputs["decide"]["actions"])}
        for name, want in item.expected.items():
            tally = counts.setdefault(name, [0, 0])
            tally[0] += given[name] == (set(want) if name == "actions" else want)
            tally[1] += 1
    return {name: (agree, n) for name, (agree, n) in counts.items()}


def actions_by_ticket(task: Task) -> dict[str, set]:
    return {i.ticket_id: set(i.checkpoint.step_outputs["decide"]["actions"])
            for i in task.items.select_related("checkpoint")}


def check_the_page(page, where: str) -> None:
    """Desktop: axe and the keyboard; 390 px: nothing off screen, axe again."""
    page.set_viewport_size(DESKTOP)
    assert_accessible(page, where)
    assert_keyboard_reaches_every_action(page, where)
    page.set_viewport_size(PHONE)
    assert_fits_the_screen(page, f"{where} at phone width")
    assert_accessible(page, f"{where} at phone width")
    page.set_viewport_size(DESKTOP)


def rehearse_through_the_upload_page(page, workers) -> Task:
    page.goto("/upload/")
    page.locator("input[name=file]").set_input_files(str(TICKETS))
    page.get_by_label("Playbook version").select_option(label="Acme Cloud support v1")
    page.get_by_label("Rehearsal (run the model steps and the rules, send nothing)").check()
    page.locator("input[name=name]").fill("Acme rehearsal")
    page.get_by_role("button", name="Upload and start").click()
    page.wait_for_url(re.compile(r"/tasks/\d+/$"))
    task = Task.objects.get(name="Acme rehearsal")
    assert task.rehearsal and task.playbook_version.label == "Acme Cloud support v1" and task.items.count() == 72

    page.goto(f"/tasks/{task.pk}/rehearsal/")  # open while it runs: it says so, then says when it is done
    expect(page.locator("#still-running")).to_contain_text("still running")
    assert workers.burst() == 0, workers.logs()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, workers.logs()
    expect(page.locator("#rehearsal-finished")).to_be_visible(timeout=15_000)
    page.get_by_role("link", name="show the whole report").click()
    return task


def read_the_agreement(page, task: Task) -> None:
    expect(page.locator("#no-effect")).to_contain_text("No effect was sent.")
    expected = agreement_in_the_database(task)
    assert set(expected) == {"category", "priority", "actions"}
    for name, (agree, n) in expected.items():
        row = page.locator(f"#agreement-table tr[data-field={name}]")
        expect(row.locator("td")).to_have_text([str(agree), str(n), f"{round(100 * agree / n)}%"])
    expect(page.locator("#dist-categories")).to_contain_text("billing")
    expect(page.locator("#tokens-total")).to_contain_text("0 tokens in total")
    expect(page.locator("table.rh-tickets tbody tr")).to_have_count(50)
    docs_screenshot(page.locator("#agreement"), "rehearsal-agreement")


def publish_version_2(task: Task, user):
    draft = draft_open(playbook_id=task.playbook_version.playbook_id, user=user)
    rules = version_spec(draft).model_dump(mode="json")["rules"]
    draft_update(version_id=draft.pk, changes={"rules": [*rules, NEW_RULE]}, user=user)
    return version_publish(version_id=draft.pk, user=user)


def compare_with_version_2(page, workers, first: Task) -> Task:
    page.goto(f"/tasks/{first.pk}/rehearsal/")
    page.get_by_label("Compare with version").select_option(label="Acme Cloud support v2")
    page.get_by_role("button", name="Rehearse and compare").click()
    page.wait_for_url(re.compile(r"/tasks/\d+/$"))
    second = Task.objects.get(source_task=first, rehearsal=True)
    assert page.url.endswith(f"/tasks/{second.pk}/") and second.playbook_version.number == 2
    assert workers.burst() == 0, workers.logs()
    second.refresh_from_db()
    assert second.status == TaskStatus.COMPLETED, workers.logs()

    before, after = actions_by_ticket(first), actions_by_ticket(second)
    escalated = sorted(t for t in before if "escalate" in after[t] - before[t])
    assert escalated, "the new rule escalates billing tickets the first version did not"
    page.goto(f"/tasks/{second.pk}/rehearsal/")
    page.locator("#compare-link").click()
    page.wait_for_url(re.compile(rf"/tasks/{first.pk}/compare/{second.pk}/$"))
    row = page.locator(f"#change-{escalated[0]}")
    expect(row).to_contain_text("+ escalate")
    changed = [t for t in before if before[t] != after[t]]
    expect(page.locator("#compare-counts")).to_contain_text(f"actions {len(changed)}")
    docs_screenshot(page.locator("main"), "rehearsal-compare")
    check_the_page(page, "compare")
    return second


def tickets_as_they_are_now(changed: str) -> bytes:
    """The file again, one ticket's body edited since the rehearsal."""
    rows = list(csv.DictReader(io.StringIO(TICKETS.read_text(encoding="utf-8"))))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    for row in rows:
        if row["ticket_id"] == changed:
            row["body"] += "\n\nPS: I found the order number: A-10042."
        writer.writerow(row)
    return out.getvalue().encode()


def go_live_with_two_left_out(page, rehearsal: Task) -> Task:
    items = list(rehearsal.items.order_by("row"))
    left_out, changed = [items[1], items[60]], items[5].ticket_id  # one on each page of the table
    page.goto(f"/tasks/{rehearsal.pk}/rehearsal/")
    page.locator(f"#ticket-{left_out[0].pk} input[name=exclude]").check()
    page.get_by_role("button", name="next →").click()
    expect(page.locator(f"#ticket-{left_out[1].pk}")).to_be_visible()
    page.locator(f"#ticket-{left_out[1].pk} input[name=exclude]").check()
    page.get_by_role("button", name="Go live…").click()
    panel = page.locator("#go-live")
    expect(panel.locator("#go-live-excluded")).to_have_text(
        f"Excluded (2): {left_out[0].ticket_id}, {left_out[1].ticket_id}.")
    expect(page.locator("#go-live-h")).to_be_focused()

    # a file that is not a ticket batch is named, and nothing is created
    panel.locator("input[name=file]").set_input_files({"name": "now.csv", "mimeType": "text/csv",
                                                       "buffer": b"ticket_id,subject\nAC-2001,x\n"})
    panel.get_by_role("button", name="Go live with 70 tickets").click()
    expect(page.locator("#go-live [role=alert]")).to_contain_text("Nothing went live")
    assert not Task.objects.filter(source_task=rehearsal, rehearsal=False).exists()
    docs_screenshot(page.locator("#go-live"), "rehearsal-go-live")
    check_the_page(page, "go live")

    panel.locator("input[name=file]").set_input_files({"name": "now.csv", "mimeType": "text/csv",
                                                       "buffer": tickets_as_they_are_now(changed)})
    panel.locator("input[name=name]").fill("Acme, live")
    panel.get_by_role("button", name="Go live with 70 tickets").click()
    page.wait_for_url(re.compile(r"/tasks/\d+/$"))
    live = Task.objects.get(source_task=rehearsal, rehearsal=False)
    assert page.url.endswith(f"/tasks/{live.pk}/") and live.name == "Acme, live"
    tickets = set(live.items.values_list("ticket_id", flat=True))
    assert len(tickets) == 70 and not tickets & {i.ticket_id for i in left_out}
    assert Event.objects.get(task=live, type=EventType.PLAN_RECOMPUTED).item.ticket_id == changed
    assert Event.objects.filter(task=live, type=EventType.PLAN_CARRIED).count() == 69
    return live


def test_rehearse_compare_and_go_live(page, live_server, workers, sandbox, alice):
    playbook_import(data=spec_from_file(PLAYBOOK), publish=True, user=alice)
    login(page, "alice", "alice-pass-123")

    first = rehearse_through_the_upload_page(page, workers)
    read_the_agreement(page, first)
    check_the_page(page, "rehearsal report")

    publish_version_2(first, alice)
    second = compare_with_version_2(page, workers, first)
    assert sandbox.counts()["deliveries"] == 0, "a rehearsal sent something"

    live = go_live_with_two_left_out(page, second)
    assert workers.burst() == 0, workers.logs()
    live.refresh_from_db()
    statuses = set(live.items.values_list("status", flat=True))
    assert ItemStatus.FAILED not in statuses and ItemStatus.QUEUED not in statuses, workers.logs()
    # decide, then execute: only the ticket that changed met the model again
    triaged = Event.objects.filter(task=live, type=EventType.STEP_DONE, payload__step="triage")
    assert [e.item.ticket_id for e in triaged] == [live.items.get(events__type=EventType.PLAN_RECOMPUTED).ticket_id]
    delivered = {d["ticket"] for d in sandbox.deliveries()}
    assert delivered and delivered <= set(live.items.values_list("ticket_id", flat=True))
    assert sandbox.counts()["duplicates"] == 0
    page.goto(f"/tasks/{second.pk}/rehearsal/")
    docs_screenshot(page.locator("#rehearsal-head"), "rehearsal-head")
    assert_no_alerts(page)
    assert page.console_errors == []


@pytest.mark.parametrize("page", [{"javascript": False}], indirect=True)
def test_without_javascript_the_marks_page_along_and_go_live_works(page, live_server, queue, alice):
    """The table is a plain GET form: the marks travel with the page number; the compare and go-live forms post."""
    many = [(f"M-{n:03}", ("billing", "normal", "save_draft"), ("billing", "normal", ["save_draft"]))
            for n in range(60)]
    task = rehearsal(many, name="Plain rehearsal")
    first, last = task.items.get(ticket_id="M-000"), task.items.get(ticket_id="M-059")
    login(page, "alice", "alice-pass-123")
    page.goto(f"/tasks/{task.pk}/rehearsal/")
    expect(page.locator("#agreement-table tr[data-field=category] td").last).to_have_text("100%")
    page.locator(f"#ticket-{first.pk} input[name=exclude]").check()
    page.get_by_role("button", name="next →").click()
    page.wait_for_url(re.compile(r"page=2"))
    page.locator(f"#ticket-{last.pk} input[name=exclude]").check()
    page.get_by_role("button", name="Go live…").click()
    expect(page.locator("#go-live-excluded")).to_have_text("Excluded (2): M-000, M-059.")
    expect(page.locator("#go-live-h")).to_be_focused()

    page.get_by_role("button", name="Go live with 58 tickets").click()
    page.wait_for_url(re.compile(r"/tasks/\d+/$"))
    live = Task.objects.get(source_task=task, rehearsal=False)
    assert live.items.count() == 58 and not live.items.filter(ticket_id__in=["M-000", "M-059"]).exists()

    # a rerun without another version: the page says how to get one; with one, the form posts
    page.goto(f"/tasks/{task.pk}/rehearsal/")
    expect(page.locator("#no-other-version")).to_be_visible()
    version_publish(version_id=draft_open(playbook_id=task.playbook_version.playbook_id).pk)
    page.reload()
    page.get_by_role("button", name="Rehearse and compare").click()
    page.wait_for_url(re.compile(r"/tasks/\d+/$"))
    assert Task.objects.filter(source_task=task, rehearsal=True, playbook_version__number=2).count() == 1
