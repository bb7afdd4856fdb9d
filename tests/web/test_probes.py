"""/healthz and /readyz: no login, nothing private, and readiness says which dependency is missing."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder

from ticketagent.web import probes

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _forget_migrations(monkeypatch):
    monkeypatch.setattr(probes, "_migrations_applied", False)


def get(client, path, **headers):
    response = client.get(path, headers=headers)
    return response.status_code, json.loads(response.content)


def test_liveness_needs_nothing(client, django_assert_num_queries):
    with django_assert_num_queries(0):  # a database outage does not get the web processes restarted
        assert get(client, "/healthz") == (200, {"status": "alive"})


def test_ready_when_database_redis_and_migrations_are(client, redis_conn):
    status, body = get(client, "/readyz")
    assert status == 200
    assert {k: body[k] for k in ("status", "database", "migrations", "redis")} == {
        "status": "ready", "database": "ok", "migrations": "ok", "redis": "ok"}
    assert isinstance(body["workers"], int)


def test_not_ready_without_redis_and_nothing_private_is_said(client, settings):
    settings.REDIS_URL = "redis://:hunter2-secret@127.0.0.1:1/0"
    status, body = get(client, "/readyz")
    assert status == 503 and body["status"] == "not ready" and body["redis"] == "unreachable"
    assert body["database"] == "ok" and body["workers"] is None
    assert "hunter2" not in json.dumps(body) and "127.0.0.1" not in json.dumps(body)


def test_not_ready_while_a_migration_is_pending(client):
    from django.db.migrations.loader import MigrationLoader

    app, latest = max(node for node in MigrationLoader(connection).graph.leaf_nodes() if node[0] == "ticketagent")
    MigrationRecorder(connection).record_unapplied(app, latest)
    status, body = get(client, "/readyz")
    assert status == 503 and body["migrations"] == "pending"


def test_probes_answer_any_host_and_skip_the_https_redirect(client, settings):
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["agents.example.com"]
    assert get(client, "/healthz", Host="10.0.0.7:8000")[0] == 200
    assert client.get("/", headers={"Host": "agents.example.com"}).status_code == 301, "everything else redirects"


def test_probes_take_only_get_and_head(client):
    assert client.head("/readyz").status_code == 200
    assert client.post("/healthz").status_code == 405
