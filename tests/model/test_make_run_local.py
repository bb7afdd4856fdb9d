"""`MODEL=local make run`: the model server is one more child of the stack, named in the banner, and Ctrl-C stops it."""

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest

from ops import model
from tests.conftest import skip_or_fail, wait_for

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = pytest.mark.slow


def test_make_run_serves_the_local_model_and_ctrl_c_stops_it(tmp_path):
    if not model.is_built():
        skip_or_fail("no local model server: run `make model`")
    out = tmp_path / "run.log"
    env = {**os.environ, "MODEL": "local", "WORKERS": "0", "TICKETAGENT_VAR_DIR": str(tmp_path / "var"),
           "TICKETAGENT_REDIS_SERVER": "system", "NO_COLOR": "1", "DJANGO_SUPERUSER_PASSWORD": "local-model-1"}
    for name in ("DATABASE_URL", "REDIS_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "PORT",
                 "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    with open(out, "wb") as log:
        run = subprocess.Popen([sys.executable, "scripts/run.py"], cwd=ROOT, env=env, stdout=log,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
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
    finally:
        run.send_signal(signal.SIGINT)
        code = run.wait(timeout=60)
    assert code == 0, out.read_text()[-3000:]
    assert "stopped; nothing left running" in out.read_text()
    assert not servers[0].is_running() or servers[0].status() == psutil.STATUS_ZOMBIE


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as page:
            return page.status == 200
    except OSError:
        return False
