"""The fake model for tests: `ops.fake_model` (one server for the tests and the bench) and its pytest fixtures."""

from __future__ import annotations

import os

import pytest

from ops.fake_model.answers import ATTACKER, UNPORTABLE_KEYWORDS, strict_schema_problem
from ops.fake_model.server import BEHAVIOURS, FakeOpenAIServer

__all__ = ["ATTACKER", "BEHAVIOURS", "UNPORTABLE_KEYWORDS", "FakeOpenAIServer", "strict_schema_problem"]


@pytest.fixture(scope="session")
def openai_server_session():
    server = FakeOpenAIServer().start()
    yield server
    server.stop()


@pytest.fixture
def openai_server(openai_server_session, settings, monkeypatch):
    """The fake server, reset, with settings pointing the real SDK at it.

    `server.worker_env` holds the same settings as environment variables for
    worker subprocesses (pass it as `extra_env` to `workers.start()`/`burst()`).
    """
    server = openai_server_session
    server.reset()
    forget_the_governor()
    # never send the model traffic through a proxy from the environment
    monkeypatch.setenv("NO_PROXY", ",".join(filter(None, ["127.0.0.1", "localhost", os.environ.get("NO_PROXY", "")])))
    settings.OPENAI_API_KEY = server.api_key
    settings.OPENAI_BASE_URL = server.base_url
    settings.OPENAI_TIMEOUT = 1.0
    settings.OPENAI_CONNECT_TIMEOUT = 1.0
    settings.OPENAI_MAX_RETRIES = 1
    server.worker_env = {
        "OPENAI_API_KEY": server.api_key, "OPENAI_BASE_URL": server.base_url, "OPENAI_TIMEOUT": "1.0",
        "OPENAI_MAX_RETRIES": "1",
        "OPENAI_MODEL": settings.OPENAI_MODEL, "NO_PROXY": "127.0.0.1,localhost",
    }
    yield server
    server.reset()
    forget_the_governor()


def forget_the_governor() -> None:
    """The model API's governor keeps back-offs and outages in Redis, shared by every process: each test
    starts with none (the keys of this test run's Redis database only)."""
    import redis
    from django.conf import settings

    conn = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2)
    for key in conn.scan_iter("ticketagent:governor:*"):
        conn.delete(key)
