"""Fakes that are real servers: tests talk to them over real sockets."""

from tests.fakes.openai_server import BEHAVIOURS, FakeOpenAIServer

__all__ = ["BEHAVIOURS", "FakeOpenAIServer"]
