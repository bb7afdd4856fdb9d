"""The upload page: whole batches or nothing, every error named."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from ticketagent.models import Item, Task

from ..factories import csv_batch

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


def post_file(client, data: bytes, name="batch.csv", **fields):
    return client.post(reverse("upload"), {"file": SimpleUploadedFile(name, data), "notify_channel": "helpdesk",
                                           "failure_threshold": 3, **fields})


def test_a_file_with_one_bad_row_creates_nothing_and_names_row_and_column(client, alice):
    client.force_login(alice)
    lines = csv_batch(4).decode().splitlines()
    lines[3] = lines[3].replace("cust3@example.com", "cust3-at-example")
    response = post_file(client, ("\n".join(lines) + "\n").encode())
    assert response.status_code == 400
    body = response.content.decode()
    assert "row 4" in body and "customer_email" in body
    assert "nothing was created" in body
    assert Task.objects.count() == 0 and Item.objects.count() == 0


def test_a_good_file_creates_the_task_and_its_items_and_enqueues_them(client, alice, queue, django_capture_on_commit_callbacks):
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=True):
        response = post_file(client, csv_batch(3), name="good.csv")
    task = Task.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("task-detail", args=[task.pk])
    assert task.items.count() == 3 and task.created_by == alice
    assert sorted(queue.job_ids) == sorted(f"item-{i.pk}-a1" for i in task.items.all())


def test_htmx_upload_errors_come_back_as_the_form_fragment(client, alice):
    client.force_login(alice)
    response = client.post(reverse("upload"), {"file": SimpleUploadedFile("x.txt", b"hello"),
                                               "notify_channel": "helpdesk"}, headers={"HX-Request": "true"})
    assert response.status_code == 400
    body = response.content.decode()
    assert body.lstrip().startswith("<form") and "<html" not in body
    assert ".csv" in body


def test_files_over_the_cap_are_refused(client, alice, settings):
    settings.UPLOAD_MAX_BYTES = 100
    client.force_login(alice)
    response = post_file(client, csv_batch(10))
    assert response.status_code == 400 and "limit" in response.content.decode()
    assert Task.objects.count() == 0


def test_viewers_cannot_upload(client, bob):
    client.force_login(bob)
    assert post_file(client, csv_batch(1)).status_code == 403
    assert Task.objects.count() == 0


def test_anonymous_users_go_to_login(client):
    response = client.get(reverse("upload"))
    assert response.status_code == 302 and reverse("login") in response["Location"]
