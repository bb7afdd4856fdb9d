"""/metrics: Prometheus text from the database at scrape time, behind a
login or a bearer token. The numbers are checked against real rows made by
the services and the gate."""

import datetime as dt
import time

import pytest
from django.db.models import Count
from django.urls import reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from ledger.models import BlockedDuplicate, Effect, EffectState
from tests.gate_run import effect_run
from ticketagent.models import Event, EventType, Item, ItemStatus, TaskStatus
from ticketagent.services.resume import task_resume
from ticketagent.services.tasks import task_cancel

from ..factories import make_task
from .conftest import notify_payload

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


def scrape(client, **headers) -> dict:
    response = client.get(reverse("metrics"), headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            key = sample.name + "".join(f"{{{k}={v}}}" for k, v in sorted(sample.labels.items()))
            samples[key] = sample.value
    return samples


@pytest.fixture
def rows(sandbox, unknown_effect):
    """Two resumes, a committed, an unknown (10 minutes old) and a skipped
    effect, one blocked duplicate, items in three states."""
    task = make_task(3)
    for _ in range(2):
        task_resume(task_id=task.pk, actor="alice")
    first, second, third = task.items.order_by("row")
    done = effect_run(action="notify_customer", payload=notify_payload(first), owner_task=str(task.pk),
                      owner_item=first.ref, owner_step="notify_customer", claim_token="w1")
    assert done.state == EffectState.COMMITTED
    again = effect_run(action="notify_customer", payload=notify_payload(first), owner_task=str(task.pk),
                       owner_item=first.ref, owner_step="notify_customer", claim_token="w2")
    assert again.blocked == "duplicate" and again.called is False
    Item.objects.filter(pk=first.pk).update(status=ItemStatus.DONE, finished_at=timezone.now())

    unknown = unknown_effect(make_task(1))
    Effect.objects.filter(pk=unknown.pk).update(intent_at=timezone.now() - dt.timedelta(seconds=600))
    cancelled = make_task(2)
    task_cancel(task_id=cancelled.pk, actor="alice")
    return task


def test_metrics_match_the_database(client, bob, rows):
    client.force_login(bob)
    m = scrape(client)
    assert m["ticketagent_resumes_total"] == Event.objects.filter(type=EventType.RESUMED).count() == 2
    assert m["ticketagent_blocked_duplicates_total"] == BlockedDuplicate.objects.count() == 1
    assert m["ticketagent_unknown_effects"] == Effect.objects.filter(state=EffectState.UNKNOWN).count() == 1
    assert 600 <= m["ticketagent_unknown_oldest_age_seconds"] < 660

    items = dict(Item.objects.values_list("status").annotate(n=Count("id")))
    effects = dict(Effect.objects.values_list("state").annotate(n=Count("id")))
    assert items == {"queued": 2, "done": 1, "waiting_review": 1, "skipped": 2}
    assert effects == {"committed": 1, "unknown": 1}
    for state in ItemStatus.values:
        assert m[f"ticketagent_items{{state={state}}}"] == items.get(state, 0), state
    for state in EffectState.values:
        assert m[f"ticketagent_effects{{state={state}}}"] == effects.get(state, 0), state
    assert m[f"ticketagent_tasks{{status={TaskStatus.CANCELLED}}}"] == 1


def test_the_numbers_follow_the_database_at_scrape_time(client, bob, rows):
    client.force_login(bob)
    assert scrape(client)["ticketagent_unknown_effects"] == 1
    from ledger.services import effect_review

    effect_review(effect_id=Effect.objects.get(state=EffectState.UNKNOWN).pk, verdict="happened",
                  reason="the customer confirmed", actor="alice")
    m = scrape(client)
    assert m["ticketagent_unknown_effects"] == 0
    assert m["ticketagent_unknown_oldest_age_seconds"] == 0
    assert m["ticketagent_effects{state=committed}"] == 2


def test_anonymous_scrapes_get_401(client, settings):
    settings.METRICS_TOKEN = "s3cret-token"
    response = client.get(reverse("metrics"))
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert b"ticketagent_" not in response.content


@pytest.mark.parametrize("header", ["Bearer wrong", "s3cret-token", "Basic czNjcmV0LXRva2Vu", "Bearer ",
                                    "Bearer s3cret-tokén"])
def test_a_wrong_token_gets_401(client, settings, header):
    settings.METRICS_TOKEN = "s3cret-token"
    assert client.get(reverse("metrics"), headers={"Authorization": header}).status_code == 401


def test_the_bearer_token_lets_a_scraper_in(client, settings):
    settings.METRICS_TOKEN = "s3cret-token"
    m = scrape(client, Authorization="Bearer s3cret-token")
    assert m["ticketagent_unknown_effects"] == 0 and m["ticketagent_resumes_total"] == 0


def test_without_a_configured_token_only_a_login_works(client, settings, bob):
    settings.METRICS_TOKEN = ""
    assert client.get(reverse("metrics"), headers={"Authorization": "Bearer "}).status_code == 401
    client.force_login(bob)
    assert "ticketagent_resumes_total" in scrape(client)


def test_the_counts_are_shared_for_health_cache_seconds(client, bob, rows, settings):
    """With HEALTH_CACHE_SECONDS the whole-database counts are counted once per
    interval for every viewer and scraper, and the page says when."""
    from django.core.cache import cache

    from ticketagent.health import HEALTH_CACHE_KEY

    settings.HEALTH_CACHE_SECONDS = 30
    cache.delete(HEALTH_CACHE_KEY)
    client.force_login(bob)
    assert scrape(client)["ticketagent_unknown_effects"] == 1
    Effect.objects.filter(state=EffectState.UNKNOWN).update(state=EffectState.COMMITTED)
    assert scrape(client)["ticketagent_unknown_effects"] == 1, "counted once per interval"
    page = client.get(reverse("tasks")).content.decode()
    assert "counted <time" in page and "at most every 30 s" in page
    cache.delete(HEALTH_CACHE_KEY)
    assert scrape(client)["ticketagent_unknown_effects"] == 0


def test_without_redis_the_counts_are_counted_for_each_request(client, bob, rows, settings, monkeypatch):
    from ticketagent import health

    class Down:
        def get(self, *args, **kwargs):
            raise ConnectionError("redis is down")

        set = get

    settings.HEALTH_CACHE_SECONDS = 30
    monkeypatch.setattr(health, "cache", Down())
    client.force_login(bob)
    assert scrape(client)["ticketagent_unknown_effects"] == 1
    assert client.get(reverse("tasks")).status_code == 200


@pytest.mark.django_db(transaction=True)  # the sweep takes its lock on a session of its own, closed after it
def test_the_recovery_sweep_counts_so_that_viewers_do_not(client, bob, rows, settings):
    from django.core.cache import cache

    from ticketagent.health import HEALTH_CACHE_KEY
    from ticketagent.scheduling.sweep import recover_loop

    settings.HEALTH_CACHE_SECONDS = 30
    cache.delete(HEALTH_CACHE_KEY)
    deadline = time.monotonic() + 60
    # until its first pass has counted (the lock is taken by a thread of its own first)
    recover_loop(interval=0.01, stop=lambda: cache.get(HEALTH_CACHE_KEY) is not None or time.monotonic() > deadline)
    shared = cache.get(HEALTH_CACHE_KEY)
    assert shared is not None
    # (the sweep may have reconciled the unknown effect meanwhile: the count is of the database after it)
    unknown = Effect.objects.filter(state=EffectState.UNKNOWN).count()
    assert shared["unknown"] == unknown
    client.force_login(bob)
    assert scrape(client)["ticketagent_unknown_effects"] == unknown
    assert cache.get(HEALTH_CACHE_KEY)["as_of"] == shared["as_of"], "the request read the sweep's count"
