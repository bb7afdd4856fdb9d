"""The rehearsal pages: the report's numbers, compare, rerun and go live -- who may, what is refused, what is made.

The rehearsals here are made by the real upload service; their items' checkpoints are written by hand, as a
worker would have left them after the decision, so the report's arithmetic is checked against known answers.
"""

import csv
import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from ticketagent.llm.schemas import SCHEMA_VERSION
from ticketagent.models import Checkpoint, Event, EventType, Item, ItemStatus, Task, TaskStatus
from ticketagent.plan import PLAN_VERSION
from ticketagent.playbooks.files import spec_from_file
from ticketagent.playbooks.models import VersionStatus
from ticketagent.playbooks.services import draft_open, playbook_import, version_default, version_publish
from ticketagent.services.upload import task_upload

from ..conftest import ROOT
from ..factories import make_task

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
COLUMNS = ["ticket_id", "customer_email", "subject", "body", "expected_category", "expected_priority",
           "expected_actions"]
#               ticket  expected (category, priority, actions)          given (category, priority, actions)
TICKETS = [("R-1", ("billing", "normal", "save_draft notify_customer"), ("billing", "normal", ["save_draft", "notify_customer"])),
           ("R-2", ("billing", "high", "save_draft escalate"), ("account", "high", ["save_draft", "notify_customer"])),
           ("R-3", ("shipping", "normal", "save_draft"), ("shipping", "low", ["save_draft", "set_status"])),
           ("R-4", ("", "", ""), ("feedback", "low", ["save_draft"])),
           ("R-5", ("technical", "urgent", "escalate"), None)]  # not decided yet


def batch(rows) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    for ticket, (category, priority, actions), *_ in rows:
        writer.writerow([ticket, f"{ticket.lower()}@example.com", f"Question {ticket}", f"Body of {ticket}.",
                         category, priority, actions])
    return out.getvalue().encode()


def decided(item: Item, *, category="billing", priority="normal", actions=("save_draft",), held=None, rules=(),
            checks=(), body="Hello, we are on it.") -> Item:
    """The item as a worker leaves a rehearsal's item: its checkpoint after the decision, done."""
    outputs = {
        "triage": {"category": category, "priority": priority, "sentiment": "neutral", "language": "en",
                   "summary": item.subject},
        "draft": {"subject": f"Re: {item.subject}", "body": body, "articles": [{"id": 1, "title": "Refunds"}]},
        "decide": {"actions": list(actions), "status": "pending", "reason": "answered", "chosen": list(actions),
                   "rules": list(rules), "checks": list(checks), "held": held or {}},
    }
    Checkpoint.objects.create(item=item, task_id=item.task_id, plan_version=PLAN_VERSION,
                              playbook_version_id=item.playbook_version_id, schema_version=SCHEMA_VERSION,
                              cursor=3, input_hash=item.input_hash(), step_outputs=outputs)
    Item.objects.filter(pk=item.pk).update(status=ItemStatus.DONE, finished_at=timezone.now())
    return item


def usage(item: Item, step: str, prompt: int, completion: int, cached: int = 0) -> None:
    Event.objects.create(task_id=item.task_id, item=item, type=EventType.STEP_DONE, payload={
        "step": step, "cursor": 1, "usage": {"calls": 1, "prompt_tokens": prompt, "completion_tokens": completion,
                                             "cached_tokens": cached, "ms": 800, "model": "gpt-test"}})


def rehearsal(rows=TICKETS, *, version=None, status=TaskStatus.COMPLETED, name="Labelled rehearsal") -> Task:
    task = task_upload(data=batch(rows), filename="labelled.csv", name=name, rehearsal=True,
                       playbook_version=version)
    items = {i.ticket_id: i for i in task.items.all()}
    for ticket, _, given in rows:
        if given:
            category, priority, actions = given
            decided(items[ticket], category=category, priority=priority, actions=actions)
    Task.objects.filter(pk=task.pk).update(status=status)
    task.refresh_from_db()
    return task


def report(client, task, **params):
    return client.get(reverse("rehearsal", args=[task.pk]), params)


# --------------------------------------------------------------------------- the report


class TestReport:
    def test_agreement_per_label_counts_decided_labelled_tickets_only(self, client, bob):
        task = rehearsal()
        client.force_login(bob)
        response = report(client, task)
        assert response.status_code == 200
        summary = response.context["summary"]
        assert (summary.total, summary.decided, summary.labelled) == (5, 4, 3)
        got = {a.field: (a.agree, a.n, a.percent) for a in summary.agreement}
        # R-1 agrees on everything; R-2 on priority only; R-3 on category only (its actions differ as a set)
        assert got == {"category": (2, 3, 67), "priority": (2, 3, 67), "actions": (1, 3, 33)}
        body = response.content.decode()
        assert 'data-field="category"><th scope="row">category</th><td>2</td><td>3</td><td><b>67%</b>' in body
        assert "No effect was sent." in body

    def test_confusion_table_and_disagreements(self, client, bob):
        task = rehearsal()
        client.force_login(bob)
        summary = report(client, task).context["summary"]
        assert summary.confusion.columns == ["billing", "account", "shipping"]  # the playbook's order
        rows = {want: dict(cells) for want, cells, _ in summary.confusion.rows}
        assert rows == {"billing": {"billing": 1, "account": 1, "shipping": 0},
                        "shipping": {"billing": 0, "account": 0, "shipping": 1}}
        wrong = {d.ticket_id: d.fields for d in summary.disagreements}
        assert wrong == {
            "R-2": [("category", "billing", "account"),
                    ("actions", "save_draft, escalate", "save_draft, notify_customer")],
            "R-3": [("priority", "normal", "low"), ("actions", "save_draft", "save_draft, set_status")],
        }
        assert summary.disagreement_count == 2

    def test_distributions_over_decided_tickets(self, client, bob):
        task = rehearsal()
        item = task.items.get(ticket_id="R-1")
        Checkpoint.objects.filter(item=item).update(step_outputs={**item.checkpoint.step_outputs, "decide": {
            **item.checkpoint.step_outputs["decide"], "held": {"notify_customer": "rule “Urgent replies”"},
            "rules": [{"rule": "Urgent replies", "held": ["notify_customer"]}],
            "checks": [{"check": "min_chars", "detail": "too short"}]}})
        client.force_login(bob)
        response = report(client, task)
        dists = {key: {s.name: (s.n, s.percent) for s in shares}
                 for key, _, _, shares in response.context["summary"].distributions}
        assert dists["categories"] == {"billing": (1, 25), "account": (1, 25), "shipping": (1, 25),
                                       "feedback": (1, 25)}
        assert dists["actions"] == {"save_draft": (4, 100), "notify_customer": (2, 50), "set_status": (1, 25)}
        assert dists["held"] == {"notify_customer — rule “Urgent replies”": (1, 25)}
        assert dists["rules"] == {"Urgent replies": (1, 25)}
        assert dists["checks"] == {"min_chars": (1, 25)}
        body = response.content.decode()
        assert "notify_customer held: rule “Urgent replies”" in body and "failed check min_chars: too short" in body

    def test_tokens_per_ticket_and_in_total(self, client, bob):
        task = rehearsal()
        first, second = task.items.get(ticket_id="R-1"), task.items.get(ticket_id="R-2")
        usage(first, "triage", 100, 20, cached=50)
        usage(first, "draft", 300, 80)
        usage(second, "decide", 200, 10)
        client.force_login(bob)
        response = report(client, task)
        rows = {r.item.ticket_id: r.tokens for r in response.context["rows"]}
        assert rows["R-1"].total == 500 and rows["R-1"].calls == 2 and rows["R-1"].cached_tokens == 50
        assert rows["R-2"].total == 210 and rows["R-3"] is None
        tokens = response.context["summary"].tokens
        assert (tokens.total, tokens.prompt_tokens, tokens.completion_tokens, tokens.calls) == (710, 600, 110, 3)
        assert "<b>710</b> tokens in total" in response.content.decode()

    def test_a_rehearsal_without_usage_shows_no_tokens(self, client, bob):
        client.force_login(bob)
        body = report(client, rehearsal()).content.decode()
        assert "<b>0</b> tokens in total" in body and "records no usage" in body

    def test_queries_do_not_grow_with_the_tickets(self, client, bob):
        small = rehearsal(TICKETS[:2], name="small")
        many = [(f"M-{n}", ("billing", "normal", "save_draft"), ("billing", "normal", ["save_draft"]))
                for n in range(60)]
        big = rehearsal(many, name="big")
        client.force_login(bob)
        counts = []
        for task in (small, big):
            with CaptureQueriesContext(connection) as queries:
                assert report(client, task).status_code == 200
            counts.append(len(queries))
        assert counts[0] == counts[1], counts

    def test_the_table_is_paginated_fifty_a_page(self, client, bob):
        many = [(f"M-{n:03}", ("", "", ""), ("billing", "normal", ["save_draft"])) for n in range(60)]
        task = rehearsal(many)
        client.force_login(bob)
        first, second = report(client, task), report(client, task, page=2)
        assert len(first.context["rows"]) == 50 and len(second.context["rows"]) == 10
        assert second.context["rows"][0].item.ticket_id == "M-050"
        fragment = client.get(reverse("rehearsal", args=[task.pk]), {"page": 2}, headers=HTMX)
        assert fragment.content.decode().lstrip().startswith('<div id="tickets">')

    def test_exclusions_are_carried_from_page_to_page(self, client, alice):
        many = [(f"M-{n:03}", ("", "", ""), ("billing", "normal", ["save_draft"])) for n in range(60)]
        task = rehearsal(many)
        marked = task.items.get(ticket_id="M-001").pk
        client.force_login(alice)
        body = report(client, task, page=2, exclude=[marked]).content.decode()
        assert f'<input type="hidden" name="exclude" value="{marked}">' in body

    def test_a_rehearsal_still_running_says_so_and_polls_its_progress(self, client, bob):
        task = rehearsal(status=TaskStatus.RUNNING)
        client.force_login(bob)
        body = report(client, task).content.decode()
        assert "still running" in body and "4 of 5 tickets ended so far" in body
        seen = body.split("part=progress&amp;seen=", 1)[1].split('"', 1)[0]  # the digest of what the page shows
        poll = reverse("rehearsal", args=[task.pk])
        assert client.get(poll, {"part": "progress", "seen": seen}, headers=HTMX).status_code == 204
        assert client.get(poll, {"part": "progress", "seen": "0"}, headers=HTMX).status_code == 200
        Task.objects.filter(pk=task.pk).update(status=TaskStatus.COMPLETED)
        done = client.get(poll, {"part": "progress", "seen": seen}, headers=HTMX)
        assert done.status_code == 286 and "show the whole report" in done.content.decode()

    def test_viewers_see_the_report_without_the_operators_forms(self, client, bob):
        client.force_login(bob)
        body = report(client, rehearsal()).content.decode()
        assert 'name="exclude"' not in body and "go-live-open" not in body and "compare-form" not in body


class TestNotFound:
    def test_a_task_that_is_not_a_rehearsal_has_no_report_compare_rerun_or_go_live(self, client, alice):
        live, rehearsed = make_task(2), rehearsal()
        client.force_login(alice)
        assert client.get(reverse("rehearsal", args=[live.pk])).status_code == 404
        assert client.get(reverse("rehearsal", args=[999999])).status_code == 404
        assert client.get(reverse("rehearsal-compare", args=[rehearsed.pk, live.pk])).status_code == 404
        assert client.get(reverse("rehearsal-compare", args=[live.pk, rehearsed.pk])).status_code == 404
        assert client.post(reverse("rehearsal-rerun", args=[live.pk]), {"version": 1}).status_code == 404
        assert client.post(reverse("go-live", args=[live.pk])).status_code == 404
        assert client.post(reverse("go-live", args=[999999])).status_code == 404
        assert Task.objects.count() == 2


class TestPermissions:
    def test_viewers_may_not_rerun_or_go_live(self, client, bob):
        task = rehearsal()
        other = version_publish(version_id=draft_open(playbook_id=task.playbook_version.playbook_id).pk)
        client.force_login(bob)
        assert client.post(reverse("rehearsal-rerun", args=[task.pk]), {"version": other.pk}).status_code == 403
        assert client.post(reverse("go-live", args=[task.pk])).status_code == 403
        assert Task.objects.count() == 1

    def test_anonymous_users_go_to_login(self, client):
        task = rehearsal()
        for url in (reverse("rehearsal", args=[task.pk]), reverse("rehearsal-compare", args=[task.pk, task.pk])):
            response = client.get(url)
            assert response.status_code == 302 and reverse("login") in response["Location"]
        assert client.post(reverse("go-live", args=[task.pk])).status_code == 302
        assert Task.objects.count() == 1

    def test_pages_refuse_the_wrong_method(self, client, alice):
        task = rehearsal()
        client.force_login(alice)
        assert client.get(reverse("go-live", args=[task.pk])).status_code == 405
        assert client.get(reverse("rehearsal-rerun", args=[task.pk])).status_code == 405
        assert client.post(reverse("rehearsal", args=[task.pk])).status_code == 405


# --------------------------------------------------------------------------- go live


def go_live(client, task, *, exclude=(), file=None, headers=None, **fields):
    data = {"exclude": [str(pk) for pk in exclude], **fields}
    if file is not None:
        data["file"] = SimpleUploadedFile("now.csv", file)
    return client.post(reverse("go-live", args=[task.pk]), data, headers=headers or {})


class TestGoLive:
    def test_the_confirmation_names_the_excluded_tickets_and_counts_the_rest(self, client, alice):
        task = rehearsal()
        first = task.items.get(ticket_id="R-1")
        client.force_login(alice)
        body = report(client, task, go_live=1, exclude=[first.pk]).content.decode()
        assert "Excluded (1): R-1." in body and "Go live with 4 tickets" in body
        assert f'<input type="hidden" name="exclude" value="{first.pk}"' in body

    def test_going_live_makes_a_live_task_of_the_other_tickets(self, client, alice):
        task = rehearsal()
        excluded = [task.items.get(ticket_id="R-2").pk, task.items.get(ticket_id="R-4").pk]
        client.force_login(alice)
        response = go_live(client, task, exclude=excluded, name="Labelled, live")
        live = Task.objects.exclude(pk=task.pk).get()
        assert response.status_code == 302 and response["Location"] == reverse("task-detail", args=[live.pk])
        assert (live.name, live.rehearsal, live.source_task_id, live.created_by) == ("Labelled, live", False,
                                                                                    task.pk, alice)
        assert sorted(live.items.values_list("ticket_id", flat=True)) == ["R-1", "R-3", "R-5"]
        carried = Event.objects.filter(task=live, type=EventType.PLAN_CARRIED)
        assert sorted(e.item.ticket_id for e in carried) == ["R-1", "R-3"]  # R-5 was never decided: recomputes
        assert Event.objects.get(task=live, type=EventType.PLAN_RECOMPUTED).item.ticket_id == "R-5"

    def test_a_file_of_the_tickets_as_they_are_now_recomputes_those_that_changed(self, client, alice):
        task = rehearsal(TICKETS[:3])
        now = batch(TICKETS[:3]).replace(b"Body of R-2.", b"Body of R-2 and one more thing.")
        client.force_login(alice)
        response = go_live(client, task, file=now)
        assert response.status_code == 302, response.content.decode().split('<ul class="errors">')[-1][:500]
        live = Task.objects.exclude(pk=task.pk).get()
        assert live.items.get(ticket_id="R-2").body == "Body of R-2 and one more thing."
        recomputed = Event.objects.get(task=live, type=EventType.PLAN_RECOMPUTED)
        assert recomputed.item.ticket_id == "R-2" and "changed since the rehearsal" in recomputed.payload["reason"]

    @pytest.mark.parametrize("case, expected", [
        ("stray id", "is not a ticket of this rehearsal"),
        ("not an id", "&#x27;abc&#x27; is not an item id"),
        ("all excluded", "every ticket of the rehearsal is excluded"),
        ("bad row", "row 3, column customer_email"),
        ("empty file", "file: file is empty"),
        ("missing ticket", "the new file lacks 1 rehearsed ticket(s), e.g. R-3"),
        ("new ticket", "row 5: ticket R-9 was not rehearsed"),
    ])
    def test_bad_input_names_the_problem_and_creates_nothing(self, client, alice, case, expected):
        task = rehearsal(TICKETS[:3])
        ids = list(task.items.values_list("pk", flat=True))
        other = make_task(1, prefix="X").items.get().pk
        good = batch(TICKETS[:3])
        posts = {
            "stray id": {"exclude": [other]},
            "not an id": {"exclude": ["abc"]},
            "all excluded": {"exclude": ids},
            "bad row": {"file": good.replace(b"r-2@example.com", b"r-2-at-example")},
            "empty file": {"file": b""},
            "missing ticket": {"file": batch(TICKETS[:2])},
            "new ticket": {"file": batch([*TICKETS[:3], ("R-9", ("", "", ""), None)])},
        }
        tasks = Task.objects.count()
        client.force_login(alice)
        response = go_live(client, task, **posts[case])
        assert response.status_code == 400
        body = response.content.decode()
        assert expected in body and "Nothing went live; no task was created." in body
        assert Task.objects.count() == tasks

    def test_with_htmx_the_errors_come_back_in_the_confirmation(self, client, alice):
        task = rehearsal(TICKETS[:2])
        client.force_login(alice)
        response = go_live(client, task, exclude=list(task.items.values_list("pk", flat=True)), headers=HTMX)
        assert response.status_code == 400
        body = response.content.decode().lstrip()
        assert body.startswith('<div id="go-live">') and "<html" not in body
        assert "every ticket of the rehearsal is excluded" in body

    def test_with_htmx_success_goes_to_the_new_task(self, client, alice):
        task = rehearsal(TICKETS[:2])
        client.force_login(alice)
        response = go_live(client, task, headers=HTMX)
        live = Task.objects.exclude(pk=task.pk).get()
        assert response.status_code == 204 and response["HX-Redirect"] == reverse("task-detail", args=[live.pk])

    def test_go_live_is_offered_only_once_the_rehearsal_stopped(self, client, alice):
        client.force_login(alice)
        assert "go-live-open" not in report(client, rehearsal(status=TaskStatus.RUNNING)).content.decode()
        assert "go-live-open" in report(client, rehearsal(name="done")).content.decode()


# --------------------------------------------------------------------------- compare with another version


def acme():
    return playbook_import(data=spec_from_file(ROOT / "docs/examples/playbook-acme.yaml"), publish=True)


class TestRerun:
    def test_the_select_offers_the_other_published_versions_of_the_same_playbook(self, client, alice):
        task = rehearsal()
        playbook_id = task.playbook_version.playbook_id
        second = version_publish(version_id=draft_open(playbook_id=playbook_id).pk)
        draft = draft_open(playbook_id=playbook_id)
        acme()
        client.force_login(alice)
        form = report(client, task).context["compare_form"]
        assert [label for _, label in form.fields["version"].choices] == [second.label]
        assert draft.status == VersionStatus.DRAFT and second.label == "Standard v2"

    def test_rehearse_again_on_another_version_goes_to_the_new_rehearsal(self, client, alice):
        task = rehearsal()
        second = version_publish(version_id=draft_open(playbook_id=task.playbook_version.playbook_id).pk)
        client.force_login(alice)
        response = client.post(reverse("rehearsal-rerun", args=[task.pk]), {"version": second.pk})
        new = Task.objects.exclude(pk=task.pk).get()
        assert response.status_code == 302 and response["Location"] == reverse("task-detail", args=[new.pk])
        assert (new.rehearsal, new.source_task_id, new.playbook_version_id) == (True, task.pk, second.pk)
        assert new.items.count() == 5
        assert new.items.get(ticket_id="R-2").expected == {"category": "billing", "priority": "high",
                                                          "actions": ["escalate", "save_draft"]}

    @pytest.mark.parametrize("which", ["same", "other playbook", "draft", "none"])
    def test_a_version_not_offered_is_refused_and_nothing_is_made(self, client, alice, which):
        task = rehearsal()
        version_publish(version_id=draft_open(playbook_id=task.playbook_version.playbook_id).pk)
        chosen = {"same": task.playbook_version_id, "other playbook": acme().pk,
                  "draft": draft_open(playbook_id=task.playbook_version.playbook_id).pk, "none": ""}[which]
        client.force_login(alice)
        response = client.post(reverse("rehearsal-rerun", args=[task.pk]), {"version": chosen})
        assert response.status_code == 400
        assert "Select a valid choice" in response.content.decode() or "required" in response.content.decode()
        assert Task.objects.count() == 1

    def test_without_another_version_the_page_says_how_to_get_one(self, client, alice):
        client.force_login(alice)
        assert "No other published version of Standard" in report(client, rehearsal()).content.decode()


class TestCompare:
    def test_what_changed_ticket_by_ticket(self, client, bob):
        first = rehearsal(TICKETS[:4])
        second = rehearsal(TICKETS[:4], name="again")
        Task.objects.filter(pk=second.pk).update(source_task=first)
        item = second.items.get(ticket_id="R-2")
        Checkpoint.objects.filter(item=item).delete()
        decided(item, category="billing", priority="high", actions=["save_draft", "escalate"],
                held={"save_draft": "reply check: min_chars"})
        other = second.items.get(ticket_id="R-3")
        Checkpoint.objects.filter(item=other).delete()
        decided(other, category="shipping", priority="low", actions=["save_draft", "set_status"],
                body="Another reply.")
        client.force_login(bob)
        assert f'href="{reverse("rehearsal-compare", args=[first.pk, second.pk])}"' in report(
            client, second).content.decode()
        response = client.get(reverse("rehearsal-compare", args=[first.pk, second.pk]))
        comparison = response.context["comparison"]
        assert comparison.matched == 4
        changes = {c.ticket_id: c.changed for c in comparison.changes}
        assert changes == {"R-2": ("category", "actions", "held"), "R-3": ("draft",)}
        assert comparison.counts == {"category": 1, "priority": 0, "actions": 1, "held": 1, "draft": 1}
        agreement = {name: (a.agree, b.agree, a.n) for name, a, b in comparison.agreement}
        assert agreement == {"category": (2, 3, 3), "priority": (2, 2, 3), "actions": (1, 2, 3)}
        row = response.content.decode().split('id="change-R-2"')[1].split("</tr>")[0]
        assert '<span class="rh-was">account</span> → <b>billing</b>' in row
        assert "+ escalate" in row and "− notify_customer" in row


# --------------------------------------------------------------------------- the upload page


def post_upload(client, data: bytes, **fields):
    return client.post(reverse("upload"), {"file": SimpleUploadedFile("labelled.csv", data),
                                           "notify_channel": "helpdesk", "failure_threshold": 3, **fields})


class TestUploadOptions:
    def test_the_upload_page_offers_published_versions_and_the_rehearsal_checkbox(self, client, alice):
        default = version_default()
        draft_open(playbook_id=default.playbook_id)
        other = acme()
        client.force_login(alice)
        body = client.get(reverse("upload")).content.decode()
        assert f'<option value="{default.pk}" selected>Standard v1</option>' in body
        assert f'<option value="{other.pk}">Acme Cloud support v1</option>' in body
        assert "Standard v2" not in body  # a draft
        assert "Rehearsal (run the model steps and the rules, send nothing)" in body

    def test_a_rehearsal_on_a_chosen_version(self, client, alice):
        other = acme()
        client.force_login(alice)
        rows = [("A-1", ("billing", "normal", "save_draft"), None)]
        response = post_upload(client, batch(rows), playbook_version=other.pk, rehearsal="on")
        task = Task.objects.get()
        assert response.status_code == 302
        assert (task.rehearsal, task.playbook_version_id) == (True, other.pk)
        assert task.items.get().expected == {"category": "billing", "priority": "normal", "actions": ["save_draft"]}

    def test_an_expected_category_the_version_lacks_is_named(self, client, alice):
        client.force_login(alice)
        rows = [("A-1", ("hardware", "", ""), None)]
        response = post_upload(client, batch(rows), playbook_version=version_default().pk, rehearsal="on")
        assert response.status_code == 400
        assert "&#x27;hardware&#x27; is not a category of Standard v1" in response.content.decode()
        assert Task.objects.count() == 0

    def test_without_a_choice_the_default_version_and_a_live_task(self, client, alice):
        client.force_login(alice)
        assert post_upload(client, batch([("A-1", ("", "", ""), None)])).status_code == 302
        task = Task.objects.get()
        assert (task.rehearsal, task.playbook_version) == (False, version_default())
