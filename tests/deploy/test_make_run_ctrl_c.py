"""`make run`'s Ctrl-C with items in flight, on a loaded machine: warm, always.

A fresh copy of the checkout runs `make run` (its private PostgreSQL and Redis, two workers of eight threads, the
sweep, gunicorn, the sandbox helpdesk) against a model that takes about a second and a half an answer and a
helpdesk that takes 0.8 s a write. A batch is uploaded from a second shell with the banner's export line,
two busy loops load both cores, and once at least eight items are in flight the "terminal" sends SIGINT to its
foreground group twice within a fraction of a second (terminals and process managers do). Then:

- everything is gone within 15 s, make's exit status 0, no process killed ("nothing killed");
- no effect was left `intent` or `unknown` and no item `running`: each item in flight finished its step or was
  handed back before its next call (read from the private PostgreSQL, started again on the copy's data).

Before, the children shared the terminal's process group: the second SIGINT reached the workers as rq's forced
stop (effects left unknown until the next start), and the sandbox went down beside the workers it was answering.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time

import psycopg
import pytest

from ops import pgserver
from sandbox.client import SandboxClient
from tests.conftest import wait_for

from .makerun import ROOT, MakeRun

pytestmark = pytest.mark.slow

IN_FLIGHT = 8
STOP_BOUND_SECONDS = 15


@contextlib.contextmanager
def slow_model(latency: float):
    proc = subprocess.Popen([sys.executable, "-m", "ops.fake_model", "--latency", str(latency), "--spread", "0.3"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = json.loads(proc.stdout.readline())["port"]
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def busy_cores(n: int = 2):
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def count(url: str, sql: str) -> int:
    with psycopg.connect(url, connect_timeout=10) as conn:
        return conn.execute(sql).fetchone()[0]


def test_ctrl_c_with_items_in_flight_on_a_loaded_machine_is_warm(tmp_path):
    with slow_model(1.5) as model_url:
        stack = MakeRun.start(tmp_path, {"OPENAI_BASE_URL": model_url, "OPENAI_API_KEY": "fake-key",
                                         "OPENAI_MODEL": "gpt-4o-mini", "WORKERS": "2", "WORKER_THREADS": "8"})
        try:
            SandboxClient(stack.shell_env["HELPDESK_URL"]).set_faults(latency_ms=800)
            database = stack.shell_env["DATABASE_URL"]
            upload = stack.manage("upload", "docs/examples/tickets.csv", "--name", "ctrl-c")
            assert upload.returncode == 0, upload.stdout[-2000:] + upload.stderr[-2000:]
            with busy_cores():
                # items in flight, some of them at their effects (an intent recorded in the last moments)
                wait_for(lambda: count(database, "SELECT count(*) FROM ticketagent_item WHERE status = 'running'")
                         >= IN_FLIGHT and count(database, "SELECT count(*) FROM ledger_effect WHERE intent_at > "
                                                          "now() - interval '2 seconds'") > 0,
                         timeout=180, interval=0.2, message=f"{IN_FLIGHT} items in flight, some at their effects")
                sent = stack.ctrl_c(twice=True)
                code = stack.wait(timeout=120)
                took = time.monotonic() - sent
        except BaseException:
            stack.stop_now()
            raise
    said = stack.stop_output()
    assert code in (0, -signal.SIGINT), said  # make itself dies of the SIGINT once run.py has stopped
    assert "killing it" not in said and "nothing killed; nothing left running" in said, said
    assert took <= STOP_BOUND_SECONDS, f"everything stopped only after {took:.1f} s:\n{said}"

    server = pgserver.start(stack.copy / "var")
    try:
        states = dict(psycopg.connect(server.url).execute(
            "SELECT state, count(*) FROM ledger_effect GROUP BY state").fetchall())
        running = count(server.url, "SELECT count(*) FROM ticketagent_item WHERE status = 'running'")
    finally:
        server.stop()
    assert states.get("intent", 0) == 0 and states.get("unknown", 0) == 0, states
    assert running == 0, f"{running} item(s) left running: their workers did not hand them back"
