"""The rehearsal report: go live with a filtered subset in one step, the report as CSV, usage in wall time.

The rehearsals are those of test_rehearsal_pages (the real upload service, checkpoints as a worker leaves
them after the decision).
"""

import csv
import io

import pytest
from django.urls import reverse

from ticketagent.models import Event, EventType, Task
from ticketagent.templatetags.ticketagent_extras import duration

from .test_rehearsal_pages import TICKETS, decided, go_live, rehearsal, report, usage

pytestmark = pytest.mark.django_db

# R-1 agrees on every label; disagree; R-4 has no labels; R-5 is not decided
MANY = [(f"M-{n}", ("billing", "normal", "save_draft"), ("billing" if n % 3 else "account", "normal", ["save_draft"]))
        for n in range(1, 31)]


class TestGoLiveWithAFilter:
    def test_the_filter_narrows_the_table_and_the_confirmation(self, client, alice):
        task = rehearsal(MANY)
        client.force_login(alice)
        response = report(client, task, category="account", agreement="disagrees", go_live=1)
        body = response.content.decode()
        accounts = sorted(f"M-{n}" for n in range(3, 31, 3))
        assert [r.item.ticket_id for r in response.context["rows"]] == sorted(accounts, key=lambda t: int(t[2:]))
        assert "Go live with 10 tickets" in body
        assert "are category account, disagrees on an expected label" in body
        assert '<input type="hidden" name="category" value="account">' in body
        assert '<input type="hidden" name="agreement" value="disagrees">' in body

    def test_going_live_with_a_filter_sends_only_the_matching_tickets_in_one_post(self, client, alice):
        task = rehearsal(MANY)
        client.force_login(alice)
        response = go_live(client, task, category="account", agreement="disagrees")
        live = Task.objects.exclude(pk=task.pk).get()
        assert response.status_code == 302
        assert sorted(live.items.values_list("ticket_id", flat=True)) == sorted(f"M-{n}" for n in range(3, 31, 3))

    def test_a_filter_and_marks_add_up(self, client, alice):
        task = rehearsal(MANY)
        marked = task.items.get(ticket_id="M-3").pk
        client.force_login(alice)
        go_live(client, task, category="account", exclude=[marked])
        live = Task.objects.exclude(pk=task.pk).get()
        assert live.items.count() == 9 and not live.items.filter(ticket_id="M-3").exists()

    @pytest.mark.parametrize("filters, tickets", [
        ({"agreement": "agrees"}, ["R-1"]),
        ({"agreement": "unlabelled"}, ["R-4"]),
        ({"held": "held"}, ["R-2"]),
        ({"held": "not_held"}, ["R-1", "R-3", "R-4"]),
        ({"category": "billing", "agreement": "agrees"}, ["R-1"]),
    ])
    def test_each_filter(self, client, alice, filters, tickets):
        task = rehearsal(TICKETS[:4] + [TICKETS[4]])
        item = task.items.get(ticket_id="R-2")
        item.checkpoint.delete()
        decided(item, category="account", priority="high", actions=["save_draft", "notify_customer"],
                held={"notify_customer": "reply check: promises"})
        client.force_login(alice)
        assert go_live(client, task, **filters).status_code == 302
        live = Task.objects.exclude(pk=task.pk).get()
        assert sorted(live.items.values_list("ticket_id", flat=True)) == tickets

    def test_a_filter_the_report_does_not_offer_sends_nothing(self, client, alice):
        task = rehearsal()
        client.force_login(alice)
        response = go_live(client, task, category="nope")
        assert response.status_code == 400 and "the filter is not one the report offers" in response.content.decode()
        assert Task.objects.count() == 1

    def test_a_filter_no_ticket_matches_sends_nothing(self, client, alice):
        task = rehearsal()
        client.force_login(alice)
        response = go_live(client, task, category="shipping", agreement="agrees")
        assert response.status_code == 400 and "nothing would go live" in response.content.decode()
        assert Task.objects.count() == 1


class TestExport:
    def test_one_row_a_ticket_in_peoples_words_without_the_customers_address_or_the_reply(self, client, bob):
        task = rehearsal()
        item = task.items.get(ticket_id="R-1")
        item.checkpoint.delete()
        decided(item, body="Your key is sk-live-123456789", held={"notify_customer": "reply check: secrets"})
        usage(item, "triage", 100, 20)
        task.items.filter(ticket_id="R-3").update(subject="=HYPERLINK(\"http://x\")")
        client.force_login(bob)
        response = client.get(reverse("rehearsal-export", args=[task.pk]))
        assert response.status_code == 200 and response["Content-Type"] == "text/csv; charset=utf-8"
        assert response["Content-Disposition"] == f'attachment; filename="rehearsal-{task.pk}.csv"'
        text = b"".join(response.streaming_content).decode("utf-8-sig")
        rows = list(csv.DictReader(io.StringIO(text)))
        assert [r["Ticket"] for r in rows] == ["R-1", "R-2", "R-3", "R-4", "R-5"]
        first = rows[0]
        assert first["Actions that would run"] == "save_draft" and first["Category"] == "billing"
        assert first["Held for approval"] == "notify_customer: reply check: secrets"
        assert first["Tokens"] == "120" and first["Category agrees"] == "yes" and first["Item status"] == "done"
        assert rows[1]["Category agrees"] == "no" and rows[4]["Category"] == "" and rows[4]["Item status"] != "done"
        assert rows[2]["Subject"].startswith("'=HYPERLINK")  # a spreadsheet does not run it
        assert "sk-live" not in text and "@example.com" not in text and "Body of" not in text
        assert "Actions that would run" in text.splitlines()[0] and "step_outputs" not in text

    def test_the_report_links_it_and_anonymous_users_go_to_login(self, client, bob):
        task = rehearsal()
        client.force_login(bob)
        assert reverse("rehearsal-export", args=[task.pk]) in report(client, task).content.decode()
        client.logout()
        assert client.get(reverse("rehearsal-export", args=[task.pk])).status_code == 302


class TestWallTime:
    def test_usage_says_the_wall_time_of_the_calls_not_the_sum_of_their_waits(self, client, bob):
        task = rehearsal()
        for item in task.items.order_by("row"):  # 5 calls side by side, a minute each: 5 min summed
            Event.objects.create(task_id=task.pk, item=item, type=EventType.STEP_DONE, payload={
                "step": "triage", "cursor": 1, "usage": {"calls": 1, "prompt_tokens": 10, "completion_tokens": 5,
                                                         "cached_tokens": 0, "ms": 60_000, "model": "gpt-test"}})
        stamps = list(Event.objects.filter(task=task, type=EventType.STEP_DONE).values_list("timestamp", flat=True))
        wall = (max(stamps) - min(stamps)).total_seconds() + 60  # the first call's start to the last one's end
        client.force_login(bob)
        response = report(client, task)
        summary = response.context["summary"]
        assert summary.wall_seconds == pytest.approx(wall) and summary.tokens.seconds == pytest.approx(300)
        body = response.content.decode()
        line = body[body.index('id="tokens-total"'):][:1000].split("</p>")[0]
        assert f'over <span id="usage-wall">{duration(wall)}</span> of wall time' in line
        assert "5 min" not in line and "waiting" not in line
