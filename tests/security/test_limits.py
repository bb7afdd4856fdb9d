"""Limits: per-user rate limits on uploads and actions (and failed logins),
the request size cap, and model calls only in workers -- never in a web request.
"""

from __future__ import annotations

import logging

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from ledger.models import Effect, EffectState
from ticketagent.models import Event, Item, ItemStatus, Task, TaskStatus
from ticketagent.scheduling import jobs
from ticketagent.web import ratelimit

from ..factories import csv_batch, make_task

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


@pytest.fixture(autouse=True)
def one_window(monkeypatch):
    """Every request of a test falls in one rate-limit window: django-ratelimit's windows are fixed (a minute,
    staggered by key), and on a loaded machine a test's few requests could straddle a window's end and find the
    budget fresh again (the third upload allowed). `test_the_window_and_retry_after` moves the clock itself."""
    import types

    import django_ratelimit.core

    start = (int(django_ratelimit.core.time.time()) // 60) * 60.0 + 1
    monkeypatch.setattr(django_ratelimit.core, "time", types.SimpleNamespace(time=lambda: start))


def upload(client, n=1, name="batch.csv", **headers):
    return client.post(reverse("upload"), {"file": SimpleUploadedFile(name, csv_batch(n)), "notify_channel": "helpdesk",
                                           "failure_threshold": 3}, headers=headers)


def assert_429(response, *, says: str):
    assert response.status_code == 429, response.content[:300]
    retry_after = int(response["Retry-After"])
    assert 1 <= retry_after <= 60
    text = response.content.decode()
    assert says in text and f"Try again in {retry_after} s" in text, text


# --------------------------------------------------------------------------- rate limits


def test_uploads_over_the_limit_get_429_with_retry_after_and_create_nothing(client, alice, staff, settings):
    settings.RATE_LIMIT_UPLOADS_PER_MINUTE = 2
    client.force_login(alice)
    assert upload(client).status_code == 302
    assert upload(client).status_code == 302
    assert_429(upload(client), says="Too many uploads: the limit is 2 a minute per user")
    assert_429(upload(client, **HTMX), says="nothing was uploaded")  # htmx: plain text for the #flash box
    assert Task.objects.count() == 2
    # the budget is per user: another operator may still upload, and alice may still act
    other = Client()
    other.force_login(staff)
    assert upload(other).status_code == 302
    task = Task.objects.filter(created_by=alice).first()
    assert client.post(reverse("task-pause", args=[task.pk])).status_code == 302


def test_actions_over_the_limit_get_429_and_change_nothing(client, alice, settings):
    settings.RATE_LIMIT_ACTIONS_PER_MINUTE = 3
    tasks = [make_task(1) for _ in range(4)]
    client.force_login(alice)
    for task in tasks[:3]:
        assert client.post(reverse("task-pause", args=[task.pk]), headers=HTMX).status_code == 200
    events = Event.objects.count()
    response = client.post(reverse("task-pause", args=[tasks[3].pk]), headers=HTMX)
    assert_429(response, says="Too many actions: the limit is 3 a minute per user")
    assert response["Content-Type"].startswith("text/plain")
    assert Task.objects.get(pk=tasks[3].pk).status == TaskStatus.QUEUED and Event.objects.count() == events
    page = client.post(reverse("task-cancel", args=[tasks[3].pk]))  # without htmx: a small page
    assert_429(page, says="nothing was changed")
    assert page["Content-Type"].startswith("text/html") and 'href="/"' in page.content.decode()
    # looking is never limited
    assert client.get(reverse("task-detail", args=[tasks[3].pk])).status_code == 200


def test_failed_logins_are_limited_per_user_name_successful_ones_never(settings, alice, bob):
    settings.RATE_LIMIT_LOGINS_PER_MINUTE = 3
    client = Client()
    for _ in range(5):  # successful logins do not count
        assert client.post(reverse("login"), {"username": "bob", "password": "bob-pass-123"}).status_code == 302
        client.logout()
    for _ in range(3):
        assert client.post(reverse("login"), {"username": "alice", "password": "guess"}).status_code == 200
    # the budget is spent: even the right password waits now (no oracle for a guesser)
    assert_429(client.post(reverse("login"), {"username": "Alice", "password": "alice-pass-123"}),
               says="Too many failed logins for this user name")
    assert_429(client.post("/admin/login/", {"username": "alice", "password": "x"}), says="failed logins")
    # other names are not affected
    assert client.post(reverse("login"), {"username": "bob", "password": "bob-pass-123"}).status_code == 302


def test_a_forged_post_is_refused_before_it_spends_the_budget(alice, settings):
    settings.RATE_LIMIT_ACTIONS_PER_MINUTE = 2
    task = make_task(1)
    forger = Client(enforce_csrf_checks=True)
    forger.force_login(alice)
    for _ in range(5):
        assert forger.post(reverse("task-pause", args=[task.pk])).status_code == 403
    honest = Client()
    honest.force_login(alice)
    assert honest.post(reverse("task-pause", args=[task.pk])).status_code == 302


def test_the_window_and_retry_after(rf, alice, monkeypatch):
    """Ten in a window, the eleventh refused; Retry-After is exactly when the next window starts."""
    import types

    import django_ratelimit.core

    clock = {"now": 1_000_000 * 60.0}
    monkeypatch.setattr(django_ratelimit.core, "time", types.SimpleNamespace(time=lambda: clock["now"]))
    request = rf.post("/upload/")
    request.user = alice
    allowances = [ratelimit.hit(request, "upload") for _ in range(11)]
    assert [v.allowed for v in allowances] == [True] * 10 + [False]
    assert allowances[-1].count == 11 and 1 <= allowances[-1].retry_after <= 60
    clock["now"] += allowances[-1].retry_after - 1
    assert not ratelimit.hit(request, "upload").allowed  # a second early: still spent
    clock["now"] += 1
    assert ratelimit.hit(request, "upload").allowed  # the next window: fresh


def test_without_the_cache_the_limits_fail_open_and_say_so(client, alice, settings, caplog):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": "redis://127.0.0.1:1/0", "OPTIONS": {"socket_connect_timeout": 0.2}}}
    settings.RATE_LIMIT_UPLOADS_PER_MINUTE = 1
    ratelimit._last_cache_warning = 0.0
    client.force_login(alice)
    with caplog.at_level(logging.WARNING, logger="ticketagent.web.ratelimit"):
        assert upload(client).status_code == 302
        assert upload(client).status_code == 302
    assert "rate limits are not enforced: the cache is unavailable" in caplog.text


# --------------------------------------------------------------------------- request size


def test_an_oversized_request_gets_413_before_it_is_read_and_creates_nothing(client, alice, settings):
    settings.REQUEST_MAX_BYTES = 64 * 1024
    client.force_login(alice)
    big = csv_batch(3) + b"x" * (100 * 1024)
    response = client.post(reverse("upload"), {"file": SimpleUploadedFile("big.csv", big), "notify_channel": "helpdesk"})
    assert response.status_code == 413
    assert "Request too large" in response.content.decode() and "Nothing was changed" in response.content.decode()
    assert Task.objects.count() == Item.objects.count() == Event.objects.count() == 0
    # a form field over DATA_UPLOAD_MAX_MEMORY_SIZE: 400, nothing decided
    settings.REQUEST_MAX_BYTES = 10 * 1024 * 1024
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * 1024
    task = make_task(1)
    item = task.items.get()
    task.items.update(status=ItemStatus.WAITING_APPROVAL)
    client.raise_request_exception = False
    response = client.post(reverse("item-approval", args=[item.pk]), {"approval": "approve", "reason": "x" * 10_000})
    assert response.status_code == 400
    assert Item.objects.get(pk=item.pk).approval == ""
    # a Content-Length that is not a number: 400
    assert client.post(reverse("task-pause", args=[task.pk]), CONTENT_LENGTH="lots").status_code == 400
    assert Task.objects.get(pk=task.pk).status == TaskStatus.QUEUED


# --------------------------------------------------------------------------- model calls only in workers


class ModelCalledInWebRequest(AssertionError):
    pass


@pytest.fixture
def no_model(monkeypatch, settings):
    """Every way to a model raises, and is counted."""
    settings.OPENAI_API_KEY = "sk-test-the-web-must-never-use-this"
    calls = []

    def forbidden(*args, **kwargs):
        calls.append(args)
        raise ModelCalledInWebRequest("a model was called in a web request")

    import openai

    from ticketagent.llm import clients
    from ticketagent.llm.offline import OfflineModel
    from ticketagent.llm.openai_client import OpenAIModel
    from ticketagent.pipeline import run

    monkeypatch.setattr(clients, "get_model_client", forbidden)
    monkeypatch.setattr(run, "get_model_client", forbidden)
    monkeypatch.setattr(OpenAIModel, "__init__", forbidden)
    monkeypatch.setattr(openai.OpenAI, "__init__", forbidden)
    for method in ("triage", "draft", "decide"):
        monkeypatch.setattr(OfflineModel, method, forbidden)
        monkeypatch.setattr(OpenAIModel, method, forbidden)
    return calls


def test_model_calls_never_happen_in_a_web_request(client, alice, no_model, unknown_effect, queue,
                                                   django_capture_on_commit_callbacks):
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=True):
        assert upload(client, n=3).status_code == 302
    task = Task.objects.get()
    assert len(jobs.get_queue(jobs.queue_name(task.helpdesk_id)).job_ids) == 3  # handed to its helpdesk's workers
    item = task.items.order_by("row").first()
    effect = unknown_effect()
    Item.objects.filter(pk=item.pk).update(status=ItemStatus.WAITING_APPROVAL)
    steps = [
        ("GET", reverse("tasks"), {}), ("GET", reverse("task-detail", args=[task.pk]), {}),
        ("GET", reverse("task-progress", args=[task.pk]), {}), ("GET", reverse("task-dry-run", args=[task.pk]), {}),
        ("GET", reverse("task-events", args=[task.pk]), {}), ("GET", reverse("item-detail", args=[item.pk]), {}),
        ("GET", reverse("review"), {}), ("GET", "/metrics", {}),
        ("POST", reverse("task-pause", args=[task.pk]), {}), ("GET", reverse("task-dry-run", args=[task.pk]), {}),
        ("POST", reverse("task-resume", args=[task.pk]), {}),
        ("POST", reverse("item-approval", args=[item.pk]), {"approval": "approve", "reason": "ok"}),
        ("POST", reverse("effect-reconcile", args=[effect.pk]), {}),
        ("POST", reverse("effect-review", args=[effect.pk]), {"verdict": "happened", "reason": "seen in helpdesk"}),
        ("POST", reverse("task-clone", args=[task.pk]), {}),
        ("POST", reverse("task-cancel", args=[task.pk]), {}),
    ]
    with django_capture_on_commit_callbacks(execute=True):
        for method, url, data in steps:
            for headers in ({}, HTMX):
                response = client.get(url, headers=headers) if method == "GET" else client.post(url, data,
                                                                                              headers=headers)
                assert response.status_code < 500, (method, url, response.status_code)
    assert Task.objects.get(pk=task.pk).status == TaskStatus.CANCELLED
    assert Effect.objects.get(pk=effect.pk).state in (EffectState.COMMITTED, EffectState.UNKNOWN)
    assert no_model == [], f"{len(no_model)} model call(s) from the web"

    # the canary: the same patch does stop a worker's model call, so "never called" above means something
    from ticketagent.pipeline.run import item_process

    fresh = make_task(1).items.get()
    with pytest.raises(ModelCalledInWebRequest):
        item_process(item_id=fresh.pk, attempt=fresh.attempt)
    assert len(no_model) == 1
