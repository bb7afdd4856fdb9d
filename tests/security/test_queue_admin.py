"""django-rq's pages: staff who are not operators may look at the queue but not change it.

Before: django-rq checks only is_staff, so a staff member outside the operators group emptied the queue
(`POST /admin/rq/queues/0/empty/` -> 302, queue emptied) while getting 403 on the dashboard's Pause.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from ..factories import make_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def looker(db):
    """Staff, not an operator, not a superuser."""
    return User.objects.create_user("stella", password="stella-pass-123", is_staff=True)


@pytest.fixture
def staff_operator(db):
    user = User.objects.create_user("olga", password="olga-pass-123", is_staff=True)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    return user


def queue_with_jobs(queue, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        make_task(3)
    assert queue.count == 3
    return queue


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("path", ["/admin/rq/queues/0/empty/", "/admin/django_rq/dashboard/queues/0/empty/"])
def test_staff_who_are_not_operators_cannot_empty_the_queue(looker, queue, django_capture_on_commit_callbacks, path):
    queue_with_jobs(queue, django_capture_on_commit_callbacks)
    client = client_for(looker)
    assert client.get(path).status_code == 200, "looking at the confirmation page is fine"
    response = client.post(path)
    assert response.status_code == 403
    assert "Only operators may change the queue" in response.content.decode()
    assert queue.count == 3, "nothing was removed"


def test_every_changing_queue_page_refuses_them(looker, queue, django_capture_on_commit_callbacks):
    queue_with_jobs(queue, django_capture_on_commit_callbacks)
    job_id = queue.job_ids[0]
    client = client_for(looker)
    for name, args in [("clear", [0]), ("requeue_all", [0]), ("delete_failed_jobs", [0]), ("actions", [0]),
                       ("delete_job", [0, job_id]), ("requeue_job", [0, job_id]), ("enqueue_job", [0, job_id]),
                       ("stop_job", [0, job_id])]:
        response = client.post(reverse(f"django_rq:{name}", args=args), {"action": "delete", "job_ids": [job_id]})
        assert response.status_code == 403, (name, response.status_code)
    assert queue.count == 3 and job_id in queue.job_ids
    assert client.post(reverse("task-pause", args=[make_task(1).pk])).status_code == 403, "the same answer as Pause"


def test_operators_and_superusers_still_can(staff_operator, staff, queue, django_capture_on_commit_callbacks):
    queue_with_jobs(queue, django_capture_on_commit_callbacks)
    assert client_for(staff_operator).post("/admin/rq/queues/0/empty/").status_code == 302
    assert queue.count == 0
    queue_with_jobs(queue, django_capture_on_commit_callbacks)
    assert client_for(staff).post("/admin/rq/queues/0/empty/").status_code == 302
    assert queue.count == 0


def test_people_who_are_not_staff_still_get_the_admin_login(alice, queue):
    response = client_for(alice).post("/admin/rq/queues/0/empty/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_the_suite_never_binds_a_task_to_a_helpdesk_it_did_not_start(settings):
    """A `make run` on the same machine serves its sandbox at the product's default address: a test's task created
    meanwhile was bound to it, its jobs went to that helpdesk's queue, and this file's queue was empty."""
    from ticketagent import settings as product

    assert settings.HELPDESK_URL != product.HELPDESK_URL == "http://127.0.0.1:8025"
