"""Which helpdesk a task acts on: shown before it is created, checked before it is created, searchable when it can be."""

import subprocess
import sys

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from ticketagent.models import Task
from ticketagent.services import readiness

from ..conftest import ROOT
from ..factories import csv_batch

pytestmark = pytest.mark.django_db


@pytest.fixture
def checked(settings):
    """The check before tasks, as in production, with no earlier answer remembered."""
    settings.HELPDESK_CHECK_BEFORE_TASKS = True
    readiness._last_ok.clear()
    yield settings
    readiness._last_ok.clear()


def post_file(client, **fields):
    return client.post(reverse("upload"), {"file": SimpleUploadedFile("b.csv", csv_batch(2)),
                                           "notify_channel": "helpdesk", "failure_threshold": 3, **fields})


def test_the_upload_page_names_the_helpdesk_without_its_credentials(client, alice, settings):
    settings.HELPDESK_URL = "https://agent:s3cret-pass@helpdesk.example.com:8443/rest"
    client.force_login(alice)
    body = client.get(reverse("upload")).content.decode()
    assert "Tasks act on <b>the generic REST helpdesk</b> at <code>https://helpdesk.example.com:8443/rest</code>" in body
    assert "s3cret-pass" not in body and "agent:" not in body


def test_a_helpdesk_that_does_not_answer_stops_the_upload_with_one_clear_error(client, alice, checked):
    checked.HELPDESK_URL = "http://127.0.0.1:9"  # nothing listens there
    client.force_login(alice)
    response = post_file(client)
    assert response.status_code == 400
    body = response.content.decode()
    assert "the generic REST helpdesk is not ready, so no task was created" in body
    assert "could not connect to the helpdesk" in body
    assert Task.objects.count() == 0


def test_with_the_helpdesk_up_the_upload_creates_the_task(client, alice, checked, sandbox):
    client.force_login(alice)
    assert post_file(client).status_code == 302
    assert Task.objects.count() == 1


def test_an_email_task_also_needs_the_mail_server(client, alice, checked, sandbox):
    checked.EMAIL_PORT = 9
    client.force_login(alice)
    response = post_file(client, notify_channel="email")
    assert response.status_code == 400 and "the mail server is not ready" in response.content.decode()
    assert Task.objects.count() == 0


def test_a_helpdesk_without_search_says_so_and_creates_nothing(client, alice):
    client.force_login(alice)
    page = client.get(reverse("upload") + "?from=helpdesk").content.decode()
    assert 'id="import-form"' in page and "cannot be searched" in page
    response = client.post(reverse("upload-helpdesk"), {"query": "status:new", "notify_channel": "helpdesk",
                                                        "failure_threshold": 3})
    assert response.status_code == 400
    assert "has no ticket search" in response.content.decode()
    assert Task.objects.count() == 0


def test_viewers_may_not_import(client, bob):
    client.force_login(bob)
    assert client.post(reverse("upload-helpdesk"), {"query": "x"}).status_code == 403
    assert Task.objects.count() == 0


def run_check(env_extra):
    env = {"DJANGO_SETTINGS_MODULE": "tests.settings", "PATH": "/usr/bin:/bin", **env_extra}
    return subprocess.run([sys.executable, "manage.py", "helpdesk-check"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_helpdesk_check_says_ready_when_everything_answers(sandbox):
    done = run_check({"HELPDESK_URL": sandbox.base_url, "EMAIL_PORT": str(sandbox.smtp_port)})
    assert done.returncode == 0, done.stderr
    assert "helpdesk: the generic REST helpdesk (rest)" in done.stdout
    assert "look-up by key: GET /api/lookup/{key}" in done.stdout
    assert done.stdout.strip().endswith("ready")


def test_helpdesk_check_names_the_problem_and_exits_1():
    done = run_check({"HELPDESK_URL": "http://127.0.0.1:9", "HELPDESK_TOKEN": "tok-123456789", "EMAIL_PORT": "9"})
    assert done.returncode == 1
    assert "problem: could not connect to the helpdesk" in done.stderr
    assert "problem: could not connect to the mail server" in done.stderr
    assert "tok-123456789" not in done.stdout + done.stderr
