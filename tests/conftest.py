"""Shared fixtures: real Redis, a real sandbox helpdesk process, real RQ
worker processes against the test database, and named users.

A test that needs something a laptop may lack (Redis, Chromium, Request Tracker)
skips with the reason; with TICKETAGENT_REQUIRE_ALL=1 (set by .ci/run) the
skip is a failure instead.
"""

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from _pytest.nodeid import coerce_node_id
from django.conf import settings
from django.contrib.auth.models import Group, User

from ledger import faults
from ops.processes import Child, Processes, database_url
from ops.sandbox_child import start_sandbox
from sandbox.client import SandboxClient
from tests.fakes.zendesk_server import zd, zendesk_server  # noqa: F401 - fixtures (a fake Zendesk)
from ticketagent import stopping

ROOT = Path(__file__).resolve().parent.parent
REQUIRE_ALL = os.environ.get("TICKETAGENT_REQUIRE_ALL") == "1"


def skip_or_fail(reason: str):
    if REQUIRE_ALL:
        pytest.fail(f"{reason} (TICKETAGENT_REQUIRE_ALL=1 makes this a failure, not a skip)")
    pytest.skip(reason)


# Tests that share something of the machine's run in one pytest-xdist process, one after the other: the
# private PostgreSQL and Redis of `make run` under var/ and the network namespaces (deploy), the local
# model's server (model), the bench's own Redis database and queue (bench), a Request Tracker (rt).
XDIST_GROUPS = {"tests/deploy/": "machine", "tests/model/": "machine", "tests/bench/": "bench",
                "tests/helpdesks/": "rt", "tests/killtest/test_killtest_rt.py": "rt"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups
def pytest_collection_modifyitems(config, items):
    # pytest-xdist (3.8) sends a group's tests to one process by the "@group" it appends to their ids, written to
    # `item._nodeid` -- which pytest 9 no longer reads (an id is `item._id`): without this, every group was spread
    # over both processes, and two local-model servers shared 2 cores (each test 10 minutes, one timed out)
    grouped = getattr(config.option, "loadgroup", False)  # set in pytest-xdist's processes under --dist loadgroup
    for item in items:
        path = str(item.path.relative_to(ROOT)) if item.path.is_relative_to(ROOT) else ""
        group = next((g for prefix, g in XDIST_GROUPS.items() if path.startswith(prefix)), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            if grouped and not item.nodeid.endswith(f"@{group}"):
                item._id = coerce_node_id(f"{item.nodeid}@{group}")


@pytest.fixture(autouse=True)
def _disarm_crash_points():
    yield
    faults.disarm()


@pytest.fixture(autouse=True)
def _not_stopping(request):
    """A test that stops a worker inside this process (its `_shutdown()`) leaves the process "stopping": every
    later test's items would hand themselves back before their model steps (`ticketagent.stopping`). Cleared,
    and said, so that the test which did it is named."""
    yield
    if stopping.process_stopping():
        stopping._stopping.clear()
        warnings.warn(f"{request.node.nodeid} left this process stopping (cleared)", stacklevel=1)


@pytest.fixture(autouse=True)
def _own_rate_limit_counters(settings):
    """Rate-limit counters live in Redis, shared by every process: each test
    counts under a prefix of its own."""
    import uuid

    settings.CACHES = {"default": {**settings.CACHES["default"], "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}}


# --------------------------------------------------------------------------- redis


@pytest.fixture(scope="session")
def redis_conn():
    import redis

    conn = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2)
    try:
        conn.ping()
    except redis.RedisError as exc:
        skip_or_fail(f"no Redis at {settings.REDIS_URL}: {exc}")
    return conn


@pytest.fixture
def queue(redis_conn):
    """The real RQ queue on a Redis database of its own, emptied around each test."""
    from ticketagent.scheduling.jobs import get_queue

    redis_conn.flushdb()
    yield get_queue()
    redis_conn.flushdb()


# --------------------------------------------------------------------------- sandbox


@pytest.fixture(scope="session")
def sandbox_process(tmp_path_factory):
    """One sandbox helpdesk process for the whole session."""
    workdir = tmp_path_factory.mktemp("sandbox")
    procs = Processes(log_dir=workdir)
    running = start_sandbox(procs, db=workdir / "sandbox.sqlite3")
    yield running
    procs.stop(grace=5)


@pytest.fixture
def sandbox(sandbox_process, settings):
    """A clean sandbox helpdesk; the channels point at it."""
    url, smtp_port = sandbox_process.url, sandbox_process.smtp_port
    client = SandboxClient(url)
    client.reset()
    settings.HELPDESK_URL = url
    settings.EMAIL_PORT = smtp_port
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    client.smtp_port = smtp_port
    yield client
    client.reset()


@pytest.fixture
def other_sandbox(tmp_path):
    """A second sandbox helpdesk, on ports of its own, with a database (and so an identity) of its own."""
    procs = Processes(log_dir=tmp_path)
    running = start_sandbox(procs, db=tmp_path / "other-helpdesk.sqlite3", quiet=True)
    client = SandboxClient(running.url)
    client.smtp_port = running.smtp_port
    yield client
    procs.stop(grace=5)


# --------------------------------------------------------------------------- workers


class Workers:
    """Real `manage.py worker` processes on the test database and queue."""

    def __init__(self, env: dict, log_dir: Path):
        self.env = env
        self.log_dir = log_dir
        self.procs = Processes(env=env, log_dir=log_dir)

    def start(self, n: int = 1, *, extra_env: dict | None = None, args: tuple[str, ...] = (),
              sweep: bool = False) -> list[Child]:
        """`n` workers. They take no turn at the recovery sweep unless `sweep`: a test that wants recovery says
        so (`sweep=True`, or `start_recovery()`), and one that does not is not raced by it."""
        args = args if sweep else ("--no-sweep", *args)
        return [self.procs.start("worker", [sys.executable, "manage.py", "worker", *args], env=extra_env)
                for _ in range(n)]

    def start_recovery(self) -> Child:
        return self.procs.start("recover", [sys.executable, "manage.py", "recover", "--loop"])

    def burst(self, timeout: float = 120, extra_env: dict | None = None) -> int:
        child = self.procs.start("burst", [sys.executable, "manage.py", "worker", "--burst"], env=extra_env)
        return child.wait(timeout=timeout)

    def command(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def kill(self, child: Child, sig=signal.SIGKILL, *, horse: bool = True) -> None:
        """Kill the worker and (unless horse=False) its work-horse."""
        self.procs.kill(child, sig, descendants=horse)

    def stop_all(self) -> None:
        self.procs.stop()

    def orphans(self):
        """Work-horses left behind by killed workers (reparented to init)."""
        return self.procs.orphans()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.log_dir.glob("*.log")))


@pytest.fixture
def workers(transactional_db, queue, sandbox, tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "RQ_QUEUE": settings.RQ_QUEUE,
        "HELPDESK_URL": sandbox.base_url,
        "EMAIL_PORT": str(sandbox.smtp_port),
        "LEASE_SECONDS": str(settings.LEASE_SECONDS),
        "HELPDESK_UPSTREAM_TIMEOUT": str(settings.HELPDESK_UPSTREAM_TIMEOUT),
        "HELPDESK_CONNECT_TIMEOUT": str(settings.HELPDESK_CONNECT_TIMEOUT),
        "HELPDESK_READ_TIMEOUT": str(settings.HELPDESK_READ_TIMEOUT),
        "EMAIL_TIMEOUT": str(settings.EMAIL_TIMEOUT),
        "OPENAI_API_KEY": settings.OPENAI_API_KEY,
        "OPENAI_BASE_URL": settings.OPENAI_BASE_URL or "",
        "OPENAI_MAX_RETRIES": str(settings.OPENAI_MAX_RETRIES),
        "OPENAI_TIMEOUT": str(settings.OPENAI_TIMEOUT),
        "OPENAI_MODEL": settings.OPENAI_MODEL,
        "PYTHONUNBUFFERED": "1",
    }
    w = Workers(env, tmp_path)
    yield w
    w.stop_all()


def child_settings(**values) -> dict[str, str]:
    """Settings that are constants of the product, for the processes a test starts (they run tests.settings,
    which applies them): pass it in their environment, e.g. `workers.start(1, extra_env=child_settings(...))`."""
    return {"TEST_SETTINGS": json.dumps(values)}


def wait_for(predicate, timeout: float = 30, interval: float = 0.2, message: str | Callable[[], str] = "condition"):
    """`predicate()`'s first true value within `timeout` s; else AssertionError with `message` -- a callable is
    called then, so that logs it quotes are the ones at the timeout, not at the start of the wait."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {message() if callable(message) else message}")


# --------------------------------------------------------------------------- users


@pytest.fixture
def alice(db):
    """An operator."""
    user = User.objects.create_user("alice", password="alice-pass-123")
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    return user


@pytest.fixture
def bob(db):
    """A viewer: may look, may not act."""
    user = User.objects.create_user("bob", password="bob-pass-123")
    user.groups.add(Group.objects.get_or_create(name="viewers")[0])
    return user


@pytest.fixture
def staff(db):
    return User.objects.create_user("sam", password="sam-pass-123", is_staff=True, is_superuser=True)
