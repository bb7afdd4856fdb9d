"""Every POST endpoint, at every access level.

Operators may act; viewers get 403 and nothing changes; anonymous users are
sent to the login page; a POST without the CSRF token is refused (403).
Hiding a button is cosmetic: these are the server-side checks.
"""

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from ledger.models import EffectState
from ticketagent.models import Event, EventType, ItemStatus, Task, TaskStatus

from ..factories import csv_batch, make_task

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


@dataclass
class Case:
    """url, POST data, a check that the action happened, one that it did not."""

    url: str
    data: Callable[[], dict]
    done: Callable[[], bool]
    untouched: Callable[[], bool]


def _task_with_status(status):
    task = make_task(2)
    Task.objects.filter(pk=task.pk).update(status=status, status_reason=f"set to {status} by the test")
    return task


def _status_is(task, status):
    return lambda: Task.objects.get(pk=task.pk).status == status


def _case(name, unknown_effect) -> Case:
    if name == "upload":
        return Case(reverse("upload"),
                    lambda: {"file": SimpleUploadedFile("b.csv", csv_batch(2)), "notify_channel": "helpdesk",
                             "failure_threshold": 3},
                    lambda: Task.objects.count() == 1, lambda: Task.objects.count() == 0)
    if name == "task-resume":
        task = _task_with_status(TaskStatus.SUSPENDED)
        return Case(reverse(name, args=[task.pk]), dict, _status_is(task, TaskStatus.RUNNING),
                    _status_is(task, TaskStatus.SUSPENDED))
    if name == "task-pause":
        task = _task_with_status(TaskStatus.RUNNING)
        return Case(reverse(name, args=[task.pk]), dict, _status_is(task, TaskStatus.PAUSED),
                    _status_is(task, TaskStatus.RUNNING))
    if name == "task-cancel":
        task = make_task(2)
        return Case(reverse(name, args=[task.pk]), dict, _status_is(task, TaskStatus.CANCELLED),
                    _status_is(task, TaskStatus.QUEUED))
    if name == "task-clone":
        task = _task_with_status(TaskStatus.NEEDS_MIGRATION)
        return Case(reverse(name, args=[task.pk]), dict, lambda: Task.objects.filter(source_task=task).exists(),
                    lambda: not Task.objects.filter(source_task=task).exists())
    if name == "item-approval":
        task = make_task(1)
        item = task.items.get()
        task.items.update(status=ItemStatus.WAITING_APPROVAL)
        return Case(reverse(name, args=[item.pk]), lambda: {"approval": "approve", "reason": "customer asked"},
                    lambda: task.items.get().approval == "approved",
                    lambda: task.items.get().status == ItemStatus.WAITING_APPROVAL and not task.items.get().approval)
    if name == "effect-reconcile":
        effect = unknown_effect()
        return Case(reverse(name, args=[effect.pk]), dict,
                    lambda: type(effect).objects.get(pk=effect.pk).state == EffectState.COMMITTED,
                    lambda: type(effect).objects.get(pk=effect.pk).state == EffectState.UNKNOWN)
    if name == "effect-review":
        effect = unknown_effect()
        return Case(reverse(name, args=[effect.pk]), lambda: {"verdict": "skip", "reason": "customer withdrew"},
                    lambda: type(effect).objects.get(pk=effect.pk).state == EffectState.SKIPPED,
                    lambda: type(effect).objects.get(pk=effect.pk).state == EffectState.UNKNOWN)
    raise AssertionError(name)


POST_ENDPOINTS = ["upload", "task-resume", "task-pause", "task-cancel", "task-clone", "item-approval",
                  "effect-reconcile", "effect-review"]


@pytest.mark.parametrize("name", POST_ENDPOINTS)
class TestPostEndpoints:
    def test_an_operator_may_act(self, name, client, alice, unknown_effect):
        case = _case(name, unknown_effect)
        client.force_login(alice)
        response = client.post(case.url, case.data())
        assert response.status_code == 302, response.content[:500]
        assert case.done()

    def test_an_operator_acting_through_htmx_gets_a_fragment(self, name, client, alice, unknown_effect):
        case = _case(name, unknown_effect)
        client.force_login(alice)
        response = client.post(case.url, case.data(), headers={"HX-Request": "true"})
        assert case.done()
        if response.status_code == 204:  # upload, clone: the browser goes to the new task
            assert response["HX-Redirect"].startswith("/tasks/")
        else:
            assert response.status_code == 200
            assert b"<html" not in response.content

    def test_a_viewer_gets_403_and_nothing_changes(self, name, client, bob, unknown_effect):
        case = _case(name, unknown_effect)
        client.force_login(bob)
        events = Event.objects.count()
        assert client.post(case.url, case.data()).status_code == 403
        assert client.post(case.url, case.data(), headers={"HX-Request": "true"}).status_code == 403
        assert case.untouched()
        assert Event.objects.count() == events

    def test_anonymous_users_are_sent_to_login(self, name, client, unknown_effect):
        case = _case(name, unknown_effect)
        response = client.post(case.url, case.data())
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login") + "?next=")
        assert case.untouched()

    def test_a_post_without_the_csrf_token_is_refused(self, name, alice, unknown_effect):
        case = _case(name, unknown_effect)
        client = Client(enforce_csrf_checks=True)
        client.force_login(alice)
        response = client.post(case.url, case.data())
        assert response.status_code == 403
        assert b"CSRF" in response.content
        assert case.untouched()

    def test_get_changes_nothing(self, name, client, alice, unknown_effect):
        case = _case(name, unknown_effect)
        client.force_login(alice)
        assert client.get(case.url).status_code == (200 if name == "upload" else 405)  # upload: the form
        assert case.untouched()


def test_the_csrf_token_in_the_htmx_header_is_accepted(alice):
    """What htmx sends: the token from <body hx-headers> as X-CSRFToken."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    task = make_task(1)
    page = client.get(reverse("task-detail", args=[task.pk]))
    token = page.cookies["csrftoken"].value
    response = client.post(reverse("task-pause", args=[task.pk]), headers={"HX-Request": "true", "X-CSRFToken": token})
    assert response.status_code == 200
    assert Task.objects.get(pk=task.pk).status == TaskStatus.PAUSED
    assert Event.objects.filter(task=task, type=EventType.PAUSED, actor="alice").exists()


PAGES = ["tasks", "upload", "review", "effect-classes", "task-detail", "task-progress", "task-dry-run",
         "task-events", "item-detail"]


@pytest.mark.parametrize("name", PAGES)
def test_every_page_needs_a_login(name, client):
    task = make_task(1)
    args = {"task-detail": [task.pk], "task-progress": [task.pk], "task-dry-run": [task.pk],
            "task-events": [task.pk], "item-detail": [task.items.get().pk]}.get(name, [])
    url = reverse(name, args=args)
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("name", ["tasks", "review", "effect-classes", "task-detail", "task-progress",
                                  "task-dry-run", "task-events", "item-detail"])
def test_viewers_may_look_everywhere(name, client, bob):
    task = make_task(1)
    args = {"task-detail": [task.pk], "task-progress": [task.pk], "task-dry-run": [task.pk],
            "task-events": [task.pk], "item-detail": [task.items.get().pk]}.get(name, [])
    client.force_login(bob)
    assert client.get(reverse(name, args=args)).status_code == 200


def test_viewers_are_not_offered_the_upload_form(client, bob):
    client.force_login(bob)
    response = client.get(reverse("upload"))
    assert response.status_code == 200
    assert b'id="nav-upload"' not in response.content and b'id="upload-form"' not in response.content
    assert b"only operators" in response.content.lower()


def test_anonymous_is_not_a_user():
    from ticketagent.web.access import is_operator

    assert not is_operator(AnonymousUser())


def test_a_poll_after_the_session_ended_sends_the_page_to_login(client):
    """Not the login form swapped into a table: the whole page goes to login, and back after."""
    task = make_task(1)
    response = client.get(reverse("task-progress", args=[task.pk]),
                          headers={"HX-Request": "true", "HX-Current-URL": f"http://testserver/tasks/{task.pk}/"})
    assert response.status_code == 204
    assert response["HX-Redirect"] == f"{reverse('login')}?next=/tasks/{task.pk}/"
    response = client.post(reverse("task-pause", args=[task.pk]), headers={"HX-Request": "true"})
    assert response.status_code == 204 and response["HX-Redirect"].startswith(reverse("login"))
    assert Task.objects.get(pk=task.pk).status == TaskStatus.QUEUED
