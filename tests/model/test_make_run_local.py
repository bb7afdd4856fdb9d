"""`MODEL=local make run`: the model server is one more child of the stack, named in the banner, and Ctrl-C stops it
-- and everything else -- with the model's calls in flight, within the grace and without a kill.

Before: a worker's warm stop finished its items in flight, and the local model, which got the terminal's SIGINT
too, still had a queue of their calls to answer: every Ctrl-C during a batch ended with "worker-1 did not stop
within 10s; killing it". Now a stopping worker cuts its model calls in flight and hands each item back (a model
call is no effect: the next attempt makes it again)."""

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import psycopg
import pytest

from ops import model
from tests.conftest import skip_or_fail, wait_for
from tests.factories import csv_batch

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = pytest.mark.slow


def test_make_run_serves_the_local_model_and_ctrl_c_stops_it(tmp_path):
    if not model.is_built():
        skip_or_fail("no local model server: run `make model`")
    out = tmp_path / "run.log"
    env = {**os.environ, "MODEL": "local", "WORKERS": "1", "TICKETAGENT_VAR_DIR": str(tmp_path / "var"),
           "TICKETAGENT_REDIS_SERVER": "system", "NO_COLOR": "1", "DJANGO_SUPERUSER_PASSWORD": "local-model-1"}
    for name in ("DATABASE_URL", "REDIS_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "PORT",
                 "DJANGO_SETTINGS_MODULE", "WORKER_THREADS", "RQ_QUEUE"):
        env.pop(name, None)
    with open(out, "wb") as log:
        run = subprocess.Popen([sys.executable, "scripts/run.py"], cwd=ROOT, env=env, stdout=log,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: "Ctrl-C stops everything" in out.read_text() or run.poll() is not None, timeout=180,
                 message="make run's banner")
        text = out.read_text()
        assert run.poll() is None, text[-3000:]
        line = re.search(r"model +local model: SmolLM2-135M at (http://127\.0\.0\.1:(\d+)/v1)", text)
        assert line, text[-3000:]
        assert f"OPENAI_BASE_URL={line.group(1)} OPENAI_API_KEY=local OPENAI_MODEL=SmolLM2-135M" in text
        # the second shell's line: the private PostgreSQL (its socket) and Redis
        assert re.search(r"export DATABASE_URL=postgres://\S+ REDIS_URL=redis://127\.0\.0\.1:\d+/0", text), \
            "the second shell's line"
        with urllib.request.urlopen(f"http://127.0.0.1:{line.group(2)}/health", timeout=5) as health:
            assert health.status == 200
        servers = [p for p in psutil.Process(run.pid).children(recursive=True) if p.name() == "llama-server"]
        assert len(servers) == 1
        web = re.search(r"dashboard +http://127\.0\.0\.1:(\d+)/", text).group(1)
        # the banner comes once gunicorn listens; its workers may still be loading Django: wait for an answer
        wait_for(lambda: _answers(f"http://127.0.0.1:{web}/healthz"), timeout=60, message="the dashboard's /healthz")

        # a batch for the worker's eight threads: Ctrl-C once the model has answered and more calls are in flight
        batch = tmp_path / "batch.csv"
        batch.write_bytes(csv_batch(12))
        urls = re.search(r"export (DATABASE_URL=\S+) (REDIS_URL=\S+)", text)
        upload = subprocess.run([sys.executable, "manage.py", "upload", str(batch)], cwd=ROOT,
                                env={**env, **dict(kv.split("=", 1) for kv in urls.groups())},
                                capture_output=True, text=True, timeout=120)
        assert upload.returncode == 0, upload.stderr[-2000:]
        database_url = urls.group(1).split("=", 1)[1]
        wait_for(lambda: _model_answered(database_url), timeout=120, message="the model's first answer")
    finally:
        os.killpg(run.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole foreground group, the model too
        code = run.wait(timeout=60)
    tail = out.read_text().split(": stopping everything")[-1]
    assert code == 0, tail[-3000:]
    assert "killing it" not in tail, tail[-3000:]
    assert "handed back" in tail and "the worker is stopping" in tail, tail[-3000:]
    assert "nothing killed; nothing left running" in tail, tail[-3000:]
    assert not servers[0].is_running() or servers[0].status() == psutil.STATUS_ZOMBIE


def _model_answered(database_url: str) -> bool:
    """Whether a step the model answered is in the event log (a worker logs no line a model call)."""
    with psycopg.connect(database_url) as conn:
        return conn.execute("SELECT EXISTS (SELECT 1 FROM ticketagent_event WHERE type = 'STEP_DONE' "
                            "AND payload ? 'usage')").fetchone()[0]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as page:
            return page.status == 200
    except OSError:
        return False
