"""Agent tests: the fake OpenAI-compatible server as a fixture (see tests/fakes/openai_server.py)."""

from tests.fakes.openai_server import openai_server, openai_server_session  # noqa: F401
