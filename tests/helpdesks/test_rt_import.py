"""Tasks from a TicketSQL search on the real RT: the rows it gives, its errors, `manage.py import-tickets` and the
upload page's helpdesk tab; the items keep RT's ticket ids and the agent then acts on those tickets."""

import uuid

import pytest
from django.urls import reverse

from ops.killtest.rt import rt_writes
from tests.conftest import child_settings
from ticketagent.models import ItemStatus, Task, TaskStatus
from ticketagent.services import readiness
from ticketagent.sources import SourceError
from ticketagent.sources.helpdesk import fetch_tickets

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def tag():
    return f"imp-{uuid.uuid4().hex[:8]}"


def some_tickets(rt, tag: str) -> list[int]:
    """Three tickets whose subjects carry `tag`: plain text, HTML, and a named requestor with a high priority."""
    rt.post("/user", {"Name": f"eve-{tag}@example.com", "EmailAddress": f"eve-{tag}@example.com",
                      "RealName": "Eve Example"}, user="root", password=rt.admin_password)
    return [
        rt.create_ticket(f"Refund please {tag}", requestor=f"ann-{tag}@example.com",
                         content="I was charged twice for invoice 7.\nPlease refund one payment."),
        rt.create_ticket(f"Login broken {tag}", requestor=f"bo-{tag}@example.com", content_type="text/html",
                         content="<p>My password reset link does not work.</p><p>Account 42 &amp; more.</p>",
                         Priority=50),
        rt.create_ticket(f"Thanks {tag}", requestor=f"eve-{tag}@example.com", Priority=95,
                         content="Great support, thank you. You can close this ticket."),
    ]


def test_a_ticketsql_search_gives_one_upload_row_per_ticket(rt_server, rt_settings, tag):
    ids = some_tickets(rt_server, tag)
    rows = fetch_tickets(f"Subject LIKE '{tag}'", limit=10)
    assert [r["ticket_id"] for r in rows] == [str(i) for i in ids]
    first, second, third = rows
    assert first == {"ticket_id": str(ids[0]), "customer_email": f"ann-{tag}@example.com", "customer_name": "",
                     "subject": f"Refund please {tag}",
                     "body": "I was charged twice for invoice 7.\nPlease refund one payment.", "priority": "low",
                     "language": "", "metadata": {"queue": "Support", "status": "new"}}
    assert second["body"] == "My password reset link does not work.\nAccount 42 & more." and \
        second["priority"] == "normal"
    assert (third["customer_name"], third["priority"]) == ("Eve Example", "urgent")
    assert len(fetch_tickets(f"Subject LIKE '{tag}'", limit=2)) == 2


def test_search_errors_are_named(rt_server, rt_settings):
    with pytest.raises(SourceError, match=r"rejected the TicketSQL query: Wrong query, expecting a VALUE"):
        fetch_tickets("Queue = = 'Support'", limit=5)
    rt_settings.HELPDESK_PASSWORD = "not-the-password"
    with pytest.raises(SourceError, match=r"refused the credentials \(401\): check HELPDESK_USER"):
        fetch_tickets("id > 0", limit=5)
    rt_settings.HELPDESK_URL = "http://127.0.0.1:9"
    with pytest.raises(SourceError, match=r"could not connect to Request Tracker"):
        fetch_tickets("id > 0", limit=5)


def replies_carry_keys(rt, task: Task) -> None:
    """Every item is done and its ticket in RT holds exactly one reply, carrying its effect's key."""
    for item in task.items.all():
        assert item.status == ItemStatus.DONE, (item.ticket_id, item.last_error)
        replies = [w for w in rt_writes(rt, item.ticket_id) if w.type == "Correspond"]
        assert len(replies) == 1 and len(replies[0].keys) == 1, replies


def test_import_tickets_command_then_the_agent_replies_on_those_tickets(rt_server, rt_workers, tag):
    ids = some_tickets(rt_server, tag)
    rt_workers.env.update(child_settings(HELPDESK_CHECK_BEFORE_TASKS=True))
    done = rt_workers.command("import-tickets", f"Subject LIKE '{tag}'", "--allow-auto-close", "--name", tag)
    assert done.returncode == 0, done.stderr
    assert "querying Request Tracker at" in done.stdout and "with 3 item(s)" in done.stdout
    task = Task.objects.get(name=tag)
    assert sorted(task.items.values_list("ticket_id", flat=True)) == sorted(str(i) for i in ids)
    assert rt_workers.burst(timeout=90) == 0, rt_workers.logs()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.status_reason
    replies_carry_keys(rt_server, task)
    login = rt_server.get(f"/ticket/{ids[1]}").body
    assert login["Status"] == "stalled"  # answered, waiting for the customer: "pending" is RT's stalled
    # RT priority 95 reads as "urgent", but a ticket's own priority decides nothing (the playbook's category and
    # rules do): the thanks that asks to be closed is closed where it is, not escalated
    thanks = rt_server.get(f"/ticket/{ids[2]}?fields[Queue]=Name").body
    assert (thanks["Queue"]["Name"], thanks["Priority"], thanks["Status"]) == ("Support", "95", "resolved")


def test_import_tickets_command_names_a_bad_query(rt_server, rt_workers):
    done = rt_workers.command("import-tickets", "Subject LIKE")
    assert done.returncode != 0
    assert "Request Tracker rejected the TicketSQL query" in done.stderr
    assert not Task.objects.exists()


def test_the_upload_pages_helpdesk_tab_makes_a_task_the_agent_acts_on(client, alice, rt_server, rt_workers,
                                                                      rt_settings, tag):
    rt_settings.HELPDESK_CHECK_BEFORE_TASKS = True  # RT is checked before the task is created
    ids = some_tickets(rt_server, tag)
    client.force_login(alice)
    page = client.get(reverse("upload") + "?from=helpdesk").content.decode()
    assert "Request Tracker" in page and "TicketSQL" in page
    readiness._last_ok.clear()
    response = client.post(reverse("upload-helpdesk"), {"query": f"Subject LIKE '{tag}'", "limit": 10,
                                                        "notify_channel": "helpdesk", "failure_threshold": 3,
                                                        "allow_auto_close": "on"})
    readiness._last_ok.clear()
    assert response.status_code == 302, response.content.decode()[:2000]
    task = Task.objects.get()
    assert [i.ticket_id for i in task.items.order_by("pk")] == [str(i) for i in ids]
    assert rt_workers.burst(timeout=90) == 0, rt_workers.logs()
    replies_carry_keys(rt_server, task)
