"""RT's readiness reads (the check, the ticket source, the check before a task is created) through a proxy that
faults every other request: they ask again with back-off and succeed; asked once, they fail. And an error says what
answered: a 503 on `GET /rt` is RT or a proxy in front of it, not a wrong HELPDESK_URL."""

import uuid

import pytest
from django.core.management import call_command

from ticketagent.channels import rt_rest
from ticketagent.channels.registry import get_channel
from ticketagent.models import Task
from ticketagent.services import readiness
from ticketagent.sources import SourceError
from ticketagent.sources.helpdesk import fetch_tickets

from .lossy_proxy import LossyProxy

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def flaky(rt_server, rt_settings):
    """The product points at RT through a proxy faulting every other request (503, closed, answer dropped)."""
    proxy = LossyProxy(rt_server.base_url, mode="flaky", every=2)
    rt_settings.HELPDESK_URL = proxy.url
    rt_settings.HELPDESK_READ_TIMEOUT = 2
    yield proxy
    proxy.close()


def test_the_check_asks_again_and_is_ready(flaky, monkeypatch):
    assert get_channel("helpdesk").check() == []
    assert flaky.faulted >= 3  # each kind of fault was met
    monkeypatch.setattr(rt_rest, "READ_ATTEMPTS", 1)  # asked once, the same check fails
    problems = get_channel("helpdesk").check()
    assert problems and "Request Tracker" in problems[0], problems


def test_an_import_through_the_flaky_proxy_creates_the_task(rt_server, flaky, rt_settings, monkeypatch):
    tag = f"flaky-{uuid.uuid4().hex[:8]}"
    ids = [rt_server.create_ticket(f"Flaky {n} {tag}", requestor=f"c{n}-{tag}@example.com") for n in range(4)]
    rt_settings.HELPDESK_CHECK_BEFORE_TASKS = True
    readiness._last_ok.clear()
    call_command("import-tickets", f"Subject LIKE '{tag}'", "--name", tag)
    readiness._last_ok.clear()
    task = Task.objects.get(name=tag)
    assert sorted(task.items.values_list("ticket_id", flat=True)) == sorted(str(i) for i in ids)
    assert flaky.faulted >= 3
    monkeypatch.setattr(rt_rest, "READ_ATTEMPTS", 1)
    with pytest.raises(SourceError):
        for _ in range(3):  # every other request is faulted: one of these meets a fault
            fetch_tickets(f"Subject LIKE '{tag}'", limit=10)


def test_a_503_on_get_rt_says_rt_or_a_proxy_answered(rt_server, rt_settings):
    proxy = LossyProxy(rt_server.base_url, mode="503")
    rt_settings.HELPDESK_URL = proxy.url
    try:
        [problem] = get_channel("helpdesk").check()
    finally:
        proxy.close()
    assert problem.startswith(f"Request Tracker (or a proxy in front of it) answered 503 to GET /rt at {proxy.url}"
                              "/REST/2.0: Service Unavailable (tried 5 times)"), problem
    assert "HELPDESK_URL must be" not in problem and proxy.forwarded == 0
    assert rt_server.password not in problem


def test_a_503_to_the_ticket_search_says_rt_or_a_proxy_answered(rt_server, rt_settings):
    proxy = LossyProxy(rt_server.base_url, mode="503")
    rt_settings.HELPDESK_URL = proxy.url
    try:
        with pytest.raises(SourceError, match=r"^Request Tracker \(or a proxy in front of it\) answered 503 to "
                                              r"the ticket search: Service Unavailable \(tried 5 times\)$"):
            fetch_tickets("id > 0", limit=5)
    finally:
        proxy.close()
