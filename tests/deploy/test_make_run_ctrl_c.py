"""`make run`'s Ctrl-C in the middle of a batch: every process stops by itself within the grace, nothing is killed.

The real stack (`scripts/run.py`: its private PostgreSQL, gunicorn, two workers, the sweep, the sandbox), a
batch of 60 tickets uploaded with `manage.py upload`, a browser's keep-alive connections open on the dashboard,
then SIGINT to the whole process group, as a terminal's Ctrl-C sends it. The exit messages are read: no
"did not stop within …; killing it", and "stopped; nothing left running". (A worker that took the signal
inside rq's log line for the job it had just dequeued used to swallow it and be killed after the grace; where the
signal lands is timing, so tests/deploy/test_worker_stop.py pins that case deterministically.)
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail, wait_for

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = pytest.mark.slow


def test_ctrl_c_during_a_batch_stops_everything_without_a_kill(tmp_path):
    if subprocess.run(["redis-server", "--version"], capture_output=True).returncode != 0:
        skip_or_fail("no redis-server for make run's private Redis")
    out = tmp_path / "run.log"
    env = {**os.environ, "TICKETAGENT_VAR_DIR": str(tmp_path / "var"), "TICKETAGENT_REDIS_SERVER": "system",
           "NO_COLOR": "1", "DJANGO_SUPERUSER_PASSWORD": "ctrl-c-check-1"}
    for name in ("DATABASE_URL", "REDIS_URL", "DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "DJANGO_SETTINGS_MODULE",
                 "OPENAI_API_KEY", "OPENAI_BASE_URL", "MODEL", "WORKERS", "RQ_QUEUE", "PORT"):
        env.pop(name, None)
    with open(out, "wb") as log:
        run = subprocess.Popen([sys.executable, "scripts/run.py"], cwd=ROOT, env=env, stdout=log,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    connections = []
    try:
        wait_for(lambda: "Ctrl-C stops everything" in out.read_text() or run.poll() is not None, timeout=240,
                 message="make run's banner")
        text = out.read_text()
        assert run.poll() is None, text[-3000:]
        port = int(re.search(r"dashboard +http://127\.0\.0\.1:(\d+)/", text).group(1))
        urls = re.search(r"export (DATABASE_URL=\S+) (REDIS_URL=\S+)", text)
        assert urls, text[-3000:]
        connections.append(wait_for(lambda: _open(port), timeout=60, message="the dashboard answering"))
        connections += [c for c in (_open(port) for _ in range(2)) if c is not None]
        upload_env = {**env, **dict(kv.split("=", 1) for kv in urls.groups())}
        upload = subprocess.run([sys.executable, "manage.py", "upload", "docs/examples/tickets.csv", "--name",
                                 "ctrl-c"], cwd=ROOT, env=upload_env, capture_output=True, text=True, timeout=120)
        assert upload.returncode == 0, upload.stderr[-2000:]
        wait_for(lambda: "Job OK" in out.read_text(), timeout=60, message="the workers taking the batch")
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole foreground group
        code = run.wait(timeout=60)
        for conn in connections:
            conn.close()
    text = out.read_text()
    tail = text.split("stopping everything")[-1]
    assert code == 0, tail[-3000:]
    assert "killing it" not in tail, tail[-3000:]
    assert "stopped; nothing left running" in tail, tail[-3000:]


def _open(port: int) -> http.client.HTTPConnection | None:
    """A keep-alive connection that has had one answer, as a browser tab holds it."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/healthz")
        answer = conn.getresponse()
        answer.read()
    except OSError:
        conn.close()
        return None
    if answer.status != 200:
        conn.close()
        return None
    return conn

