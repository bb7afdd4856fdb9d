"""The task page has one poll: progress, items table, timeline and resume count come in one answer
(204 while it would show what the page shows, 286 once the task is final).

Before: the cursor was the task's last event id, and a change that appended no event (an item's status moving
with Pause) left the page stale until a reload."""

import pytest
from django.urls import reverse

from ticketagent.models import Item, ItemStatus, Task, TaskStatus
from ticketagent.services.tasks import task_pause

from ..factories import make_task

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

HTMX = {"HX-Request": "true"}


def _seen(html: str) -> str:
    return html.split("seen=", 1)[1].split("&", 1)[0].split('"', 1)[0]


def test_one_poll_brings_everything_that_moves_and_stays_quiet_while_nothing_does(client, bob):
    client.force_login(bob)
    task = make_task(2)
    page = client.get(reverse("task-detail", args=[task.pk])).content.decode()
    assert page.count('hx-trigger="every') == 2, "one poll for the task, one for the header's counts"
    url = reverse("task-progress", args=[task.pk])
    # the page carries the digest of its live part: the first poll after loading it finds nothing new
    assert client.get(url, {"shown": "queued", "seen": _seen(page)}, headers=HTMX).status_code == 204
    first = client.get(url, {"shown": "queued", "seen": "0"}, headers=HTMX)
    html = first.content.decode()
    assert first.status_code == 200 and html.lstrip().startswith('<div id="progress"')
    for part in ('id="items" hx-swap-oob="true"', 'id="timeline" hx-swap-oob="true"',
                 'id="resume-count" hx-swap-oob="true"'):
        assert part in html, part
    assert "T-1" in html and "<html" not in html
    seen = _seen(html)
    assert seen == _seen(page) and "live-mark" not in html
    assert client.get(url, {"shown": "queued", "seen": seen}, headers=HTMX).status_code == 204

    # a change no event records (an item's status, written alone): the page still learns it
    assert Item.objects.filter(pk=task.items.order_by("row")[0].pk).update(status=ItemStatus.RUNNING) == 1
    moved = client.get(url, {"shown": "queued", "seen": seen}, headers=HTMX)
    assert moved.status_code == 200 and 'data-status="running"' in moved.content.decode()
    seen = _seen(moved.content.decode())

    task_pause(task_id=task.pk, actor="alice")  # a change: a new event, a new status
    changed = client.get(url, {"shown": "queued", "seen": seen}, headers=HTMX)
    assert changed.status_code == 200 and 'hx-sync="#task-head:replace" hx-swap-oob="true"' in changed.content.decode()
    assert "PAUSED" in changed.content.decode()

    Task.objects.filter(pk=task.pk).update(status=TaskStatus.COMPLETED)
    final = client.get(url, {"shown": "paused", "seen": seen}, headers=HTMX)
    assert final.status_code == 286 and "hx-trigger" not in final.content.decode().split('id="items"')[0]
