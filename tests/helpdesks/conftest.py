"""A real Request Tracker 5 server for the helpdesk tests (one per test session).

Skips (or, with TICKETAGENT_REQUIRE_ALL=1, fails) when RT is not installed; an
installed RT that cannot start is an error, never a skip.
"""

import pytest

from ops.rt_server import rt_missing, start_rt_server, stop_rt_server
from tests.conftest import skip_or_fail


@pytest.fixture(scope="session")
def rt_server():
    """The running RT (ops/rt_server.py RTServer): ``base_url``,
    ``rest_url``, ``user``/``password`` (the agent account), ``users``, ``queue``,
    ``queues``, ``mail_path``, ``mails()``, ``create_ticket()`` and
    ``get``/``post``/``put`` for REST2 calls."""
    missing = rt_missing()
    if missing:
        skip_or_fail(missing)
    server = start_rt_server()
    yield server
    stop_rt_server(server)
