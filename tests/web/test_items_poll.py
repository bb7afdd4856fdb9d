"""The items table refreshes itself while the task runs, and stops when it is final."""

import pytest
from django.urls import reverse

from ticketagent.models import Task, TaskStatus

from ..factories import make_task

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


def test_the_items_fragment_polls_while_running_and_stops_when_final(client, bob):
    client.force_login(bob)
    task = make_task(2)
    url = reverse("task-detail", args=[task.pk])
    running = client.get(url, headers={"HX-Request": "true", "HX-Target": "items"}).content.decode()
    assert running.lstrip().startswith('<div id="items"') and 'hx-trigger="every 3s"' in running
    assert "T-1" in running and "<html" not in running
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.COMPLETED)
    final = client.get(url, headers={"HX-Request": "true", "HX-Target": "items"}).content.decode()
    assert "hx-trigger" not in final
