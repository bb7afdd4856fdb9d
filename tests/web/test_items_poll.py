"""The task page has one poll: progress, items table, timeline and resume count come in one answer
(204 while nothing changed, 286 once the task is final)."""

import pytest
from django.urls import reverse

from ticketagent.models import Task, TaskStatus
from ticketagent.services.tasks import task_pause

from ..factories import make_task

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

HTMX = {"HX-Request": "true"}


def test_one_poll_brings_everything_that_moves_and_stays_quiet_while_nothing_does(client, bob):
    client.force_login(bob)
    task = make_task(2)
    page = client.get(reverse("task-detail", args=[task.pk])).content.decode()
    assert page.count('hx-trigger="every') == 2, "one poll for the task, one for the header's counts"
    url = reverse("task-progress", args=[task.pk])
    first = client.get(url, {"shown": "queued", "since": "0"}, headers=HTMX)
    html = first.content.decode()
    assert first.status_code == 200 and html.lstrip().startswith('<div id="progress"')
    for part in ('id="items" hx-swap-oob="true"', 'id="timeline" hx-swap-oob="true"',
                 'id="resume-count" hx-swap-oob="true"'):
        assert part in html, part
    assert "T-1" in html and "<html" not in html
    since = html.split("since=", 1)[1].split("&", 1)[0].split('"', 1)[0]
    assert client.get(url, {"shown": "queued", "since": since}, headers=HTMX).status_code == 204

    task_pause(task_id=task.pk, actor="alice")  # a change: a new event, a new status
    changed = client.get(url, {"shown": "queued", "since": since}, headers=HTMX)
    assert changed.status_code == 200 and 'hx-sync="#task-head:replace" hx-swap-oob="true"' in changed.content.decode()
    assert "PAUSED" in changed.content.decode()

    Task.objects.filter(pk=task.pk).update(status=TaskStatus.COMPLETED)
    final = client.get(url, {"shown": "paused", "since": since}, headers=HTMX)
    assert final.status_code == 286 and "hx-trigger" not in final.content.decode().split('id="items"')[0]
