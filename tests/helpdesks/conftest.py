"""A real Request Tracker 5 server for the helpdesk tests (one per test session), and the product pointed at it.

Skips (or, with TICKETAGENT_REQUIRE_ALL=1, fails) when RT is not installed; an
installed RT that cannot start is an error, never a skip.
"""

import pytest

from ops.rt_server import OTHER_QUEUE, rt_missing, start_rt_server, stop_rt_server
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


def rt_environment(rt_server) -> dict:
    """The settings (as environment variables) that point the product at the test RT."""
    return {"HELPDESK_KIND": "rt", "HELPDESK_URL": rt_server.base_url, "HELPDESK_USER": rt_server.user,
            "HELPDESK_PASSWORD": rt_server.password, "RT_ESCALATION_QUEUE": OTHER_QUEUE,
            "RT_ESCALATION_OWNER": "", "RT_ESCALATION_PRIORITY": "100", **RT_TIMING}


# A test RT (SQLite, one process) answers slower than the sandbox; an RT action
# is up to five requests (a read may be asked again), and the lease must cover a
# whole call: three times connect + read, plus the margin and a heartbeat.
RT_TIMING = {"HELPDESK_CONNECT_TIMEOUT": "1", "HELPDESK_READ_TIMEOUT": "3", "LEASE_SECONDS": "15"}


@pytest.fixture
def rt_settings(rt_server, settings):
    """This process's channels point at the test RT (HELPDESK_KIND=rt)."""
    settings.HELPDESK_KIND = "rt"
    settings.HELPDESK_URL = rt_server.base_url
    settings.HELPDESK_USER = rt_server.user
    settings.HELPDESK_PASSWORD = rt_server.password
    settings.RT_ESCALATION_QUEUE = OTHER_QUEUE
    settings.RT_ESCALATION_OWNER = ""
    settings.RT_ESCALATION_PRIORITY = 100
    settings.HELPDESK_CONNECT_TIMEOUT, settings.HELPDESK_READ_TIMEOUT = 1.0, 3.0
    settings.LEASE_SECONDS = 15.0
    return settings


@pytest.fixture
def rt_workers(workers, rt_server, rt_settings):
    """Real worker and sweep processes acting on the test RT."""
    env = rt_environment(rt_server)
    workers.env.update(env)
    workers.procs.env.update(env)
    return workers
