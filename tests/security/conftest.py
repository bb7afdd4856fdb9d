"""Fixtures for the security tests.

Rate-limit counters live in the cache (Redis, shared by every process); each
test gets a key prefix of its own so counters never leak between tests.
"""

import uuid

import pytest

from tests.fakes.openai_server import openai_server, openai_server_session  # noqa: F401 - fixtures
from tests.web.conftest import unknown_effect  # noqa: F401 - fixture


@pytest.fixture(autouse=True)
def _own_rate_limit_counters(settings):
    settings.CACHES = {"default": {**settings.CACHES["default"], "KEY_PREFIX": f"sec-test-{uuid.uuid4().hex}"}}
