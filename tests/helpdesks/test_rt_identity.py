"""Which RT a worker reaches, as RT itself reports it: the moment its database was initialised (queue 1's creation
time), the same through any URL that reaches it; a task created against RT is bound to it."""

import pytest

from ticketagent.channels.registry import get_channel
from ticketagent.channels.served import helpdesk_reached
from ticketagent.services.tasks import task_create
from ticketagent.upload.rows import TicketRow

pytestmark = pytest.mark.django_db


def test_rt_reports_the_moment_its_database_was_initialised_through_any_url(rt_server, rt_settings):
    initialised = rt_server.get("/queue/1", user="root", password=rt_server.admin_password).body["Created"]
    assert initialised
    ident = get_channel("helpdesk").identity()
    assert ident == f"rt|initialised {initialised}"
    assert get_channel("helpdesk").identity() == ident  # asked again: the same RT
    rt_settings.HELPDESK_URL = rt_server.base_url.replace("127.0.0.1", "localhost")  # another URL, the same RT
    assert get_channel("helpdesk").identity() == ident


def test_a_task_created_against_rt_is_bound_to_it(rt_server, rt_settings):
    ticket = rt_server.create_ticket("Bound to this RT")
    task = task_create(rows=[TicketRow(row=2, ticket_id=str(ticket), customer_email="x@example.com", subject="s",
                                       body="b")], name="rt bound")
    reached = helpdesk_reached()
    assert (task.helpdesk_id, task.helpdesk_kind, task.helpdesk_url) == (reached.id, "rt", rt_server.base_url)
    assert task.helpdesk_label == f"rt helpdesk at {rt_server.base_url} ({reached.id})"
