"""Fixtures for the security tests.

(Each test counts rate limits under its own key prefix: tests/conftest.py.)
"""

from tests.fakes.openai_server import openai_server, openai_server_session  # noqa: F401 - fixtures
from tests.web.conftest import unknown_effect  # noqa: F401 - fixture
