"""Fixtures for the deployment tests: the production stack (tests/deploy/stack.py)."""

from tests.deploy.stack import production_stack  # noqa: F401 - fixture
