"""The production stack for tests: collectstatic, then the Procfile's web (gunicorn), worker (which sweeps)
processes on ticketagent.settings with DEBUG off, against the suite's PostgreSQL, Redis and sandbox.

Used by tests/deploy/ and by the production browser test (tests/browser/test_production_stack.py).
"""

from __future__ import annotations

import http.client
import json
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ops.processes import Processes, free_port, wait_port
from ops.procfile import command_line, read_procfile
from tests.conftest import ROOT

OPERATOR = ("ops", "ops-pass-4711-correct-horse")


@dataclass
class Stack:
    env: dict
    procs: Processes
    port: int
    log_dir: Path

    @property
    def url(self) -> str:
        return f"http://localhost:{self.port}"

    def manage(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True,
                              text=True, timeout=180)

    def start(self, name: str, **extra_env):
        env = {**self.env, **extra_env}
        return self.procs.start(name, command_line(read_procfile(ROOT / "Procfile")[name], env), env=extra_env or None)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in sorted(self.log_dir.glob("*.log")))

    def get(self, path: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", path, headers={"Host": f"localhost:{self.port}", **(headers or {})})
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()

    def wait_ready(self, timeout: float = 60, workers: int = 0) -> dict:
        """Until /readyz answers 200 and counts `workers` (a worker boots beside the web server: it registers
        after its own start-up, which /readyz does not wait for)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                status, _, body = self.get("/readyz")
                last = json.loads(body)
                if status == 200 and last.get("workers", 0) >= workers:
                    return last
            except (OSError, ValueError, http.client.HTTPException):
                pass
            time.sleep(0.3)
        raise AssertionError(f"/readyz never said ready: {last}\n{self.logs()}")


def production_env(workers, tmp_path: Path, port: int) -> dict:
    """The environment of a deployment: the suite's services, ticketagent.settings, DEBUG off."""
    return {
        **workers.env,
        "DJANGO_SETTINGS_MODULE": "ticketagent.settings",
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "localhost,127.0.0.1",
        "SECURE_SSL_REDIRECT": "false",  # plain http on the loopback; everything else as in production
        "TICKETAGENT_VAR_DIR": str(tmp_path / "var"),
        "PORT": str(port),
        "WEB_CONCURRENCY": "2",
        "WEB_ACCESS_LOG": "",
    }


def start_stack(workers, tmp_path: Path, *, processes=("web", "worker"),
                env_changes: dict[str, str | None] | None = None) -> Stack:
    """`env_changes` replaces variables of production_env(); a None value removes one."""
    port = free_port()
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    env = production_env(workers, tmp_path, port)
    for name, value in (env_changes or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    stack = Stack(env, Processes(env=env, log_dir=log_dir), port, log_dir)
    collected = stack.manage("collectstatic", "--noinput", "--verbosity", "0")
    assert collected.returncode == 0, collected.stderr[-3000:]
    created = subprocess.run(
        [sys.executable, "manage.py", "createsuperuser", "--noinput", "--username", OPERATOR[0], "--email",
         "ops@example.com"], cwd=ROOT, env={**env, "DJANGO_SUPERUSER_PASSWORD": OPERATOR[1]},
        capture_output=True, text=True, timeout=120)
    assert created.returncode == 0, created.stderr[-3000:]
    for name in processes:
        stack.start(name)
    if "web" in processes:
        if not wait_port(port, 60):
            raise AssertionError(f"gunicorn did not listen on {port}\n{stack.logs()}")
        stack.wait_ready(workers=1 if "worker" in processes else 0)
    return stack


@pytest.fixture
def production_stack(transactional_db, workers, tmp_path):
    stack = start_stack(workers, tmp_path)
    yield stack
    stack.procs.stop(grace=10)
