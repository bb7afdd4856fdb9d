"""Smoke test of `python -m ops bench` with tiny sizes: the sections run and the
table comes out. No timing is asserted: the figures are the benchmark's
business (docs/benchmarks.md), not the test suite's."""

import io
import json
import os

import pytest
from django.core.management import call_command
from django.db import connection

from ops.bench.results import BEGIN, END, Results, Row, write_doc
from ops.bench.sizes import TINY
from ops.fake_model.answers import valid_answer as answer_for
from ticketagent.llm.schemas import Decision, Reply, Triage

pytestmark = pytest.mark.django_db(transaction=True)


def test_in_process_sections_print_a_table(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    out = io.StringIO()
    call_command("bench", "--in-place", "--sizes", "tiny", "--only", "gate,dashboard,dryrun,replay", "--no-write",
                 stdout=out)
    text = out.getvalue()
    assert "| # | figure | result | target |" in text
    for figure in ("gate (ledger only) vs floor", "task list", "task detail", "review queue", "/metrics",
                   "dry-run of a", "replay of"):
        assert figure in text, text
    raw = json.loads((tmp_path / "bench" / "last-run.json").read_text())
    assert raw["sizes"] == "tiny" and raw["raw"]["dryrun"]["items"] == TINY.dataset_big_task
    assert "ledger rows by hand" in text and "one statement per phase" in text, text
    assert set(raw["raw"]["gate"]["median_ms"]) == {"floor", "gate", "wired", "raw", "single", "fenced"}


@pytest.mark.slow
def test_worker_sections_run_and_leave_nothing_behind(settings, tmp_path, sandbox, queue):
    import psutil

    settings.VAR_DIR = tmp_path
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    out = io.StringIO()
    call_command("bench", "--in-place", "--sizes", "tiny", "--only", "overhead,latency", "--no-write", stdout=out)
    text = out.getvalue()
    assert "durable vs naive" in text and "model 0.05 s/call" in text, text
    assert "the commits the protocol requires" in text, text
    assert "1 forking worker, model 0.05 s/call" in text and "peak memory per forking worker" in text, text
    assert "1 worker, model 0.05 s per item (0.017 s/call)" in text and "≥ 0.9 × W items/s" in text, text
    left = {p.pid for p in psutil.Process().children(recursive=True)} - before
    assert not left, f"processes left running: {left}"


def test_model_server_answers_fit_the_schemas():
    ticket = {"ticket_id": "T-1", "subject": "Refund for invoice 7", "body": "charged twice", "priority": "high"}
    Triage.model_validate(answer_for("Triage", ticket))
    Reply.model_validate(answer_for("Reply", ticket))
    Decision.model_validate(answer_for("Decision", ticket))


def test_the_doc_keeps_its_prose_and_replaces_the_table(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\nprose before\n\n{BEGIN}\nold table\n{END}\n\nprose after\n")
    results = Results(sizes=TINY, rows=[Row("1", "figure", "result", "target", True)],
                      machine={"command": "python -m ops bench", "CPU": "test"})
    write_doc(doc, results)
    text = doc.read_text()
    assert "prose before" in text and "prose after" in text and "old table" not in text
    assert "| 1 | figure | result | target | met |" in text


@pytest.mark.slow
def test_peer_and_queue_sections_run_and_leave_nothing_behind(settings, tmp_path, sandbox, queue):
    """The sections of the DBOS peer, writes per item, upload, fair queues,
    unknowns, the remaining window, items in flight, the rate limit and the fleet, with tiny sizes: their rows come out, nothing keeps running,
    and the databases carry no statement logging afterwards."""
    import psutil
    import psycopg

    from ops.bench.dbos_peer import dbos_database_name
    from ops.bench.pgstats import admin_connection
    from ops.processes import database_url

    settings.VAR_DIR = tmp_path
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    out = io.StringIO()
    try:
        call_command("bench", "--in-place", "--sizes", "tiny", "--only",
                     "peer,writes,upload,fairness,unknowns,window,inflight,ratelimit,fleet", "--no-write", stdout=out)
    finally:
        with admin_connection(database_url()) as admin:
            settings_left = admin.execute("SELECT count(*) FROM pg_db_role_setting s JOIN pg_database d ON "
                                          "d.oid = s.setdatabase WHERE d.datname IN (%s, %s)",
                                          [connection.settings_dict["NAME"], dbos_database_name()]).fetchone()[0]
            admin.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                psycopg.sql.Identifier(dbos_database_name())))
    text = out.getvalue()
    for figure in ("on DBOS Transact", "transactions per item, ours", "upload of 200 tickets",
                   "Redis round trips", "its first item starts after", "jobs still in Redis",
                   "unknown → settled, answered", "effects delivered twice, ours vs DBOS",
                   "Last lease check → request leaves", "1 process × WORKER_THREADS=3: 3 in flight",
                   "2 processes × 1 item (today's workers)", "DBOS Transact, 1 process × 3 workflows",
                   "model API at 6000 requests/min (429 past it)", "fleet at 2 in flight, every process a side needs",
                   "items/s at 2 in flight", "one worker at 2 in flight, peak RSS",
                   "one worker process at 2 in flight, model 0.05 s/call"):
        assert figure in text, text
    # a row is INVALID when a side's items or workflows did not all end done (the peer's helpdesk step failing, say)
    assert "INVALID" not in text, text
    assert settings_left == 0
    left = {p.pid for p in psutil.Process().children(recursive=True)} - before
    assert not left, f"processes left running: {left}"


def test_the_operators_tools_run_on_their_own_settings_and_the_product_has_none_of_them(settings, tmp_path):
    """`python -m ops` has killtest and bench (ops.settings); the product's manage.py knows neither; and a
    bench run from the shell, which re-runs itself in a child process, works end to end."""
    import subprocess
    import sys
    from pathlib import Path

    from ops.processes import database_url

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "TEST_DATABASE_URL")}
    tools = subprocess.run([sys.executable, "-m", "ops", "help"], cwd=root, env=env, capture_output=True, text=True)
    assert tools.returncode == 0 and "killtest" in tools.stdout and "bench" in tools.stdout, tools.stderr
    product = subprocess.run([sys.executable, "manage.py", "help", "--commands"], cwd=root,
                             env={**env, "DJANGO_SETTINGS_MODULE": "ticketagent.settings"},
                             capture_output=True, text=True)
    assert product.returncode == 0, product.stderr
    assert {"killtest", "bench"}.isdisjoint(product.stdout.split()) and "worker" in product.stdout.split()
    bench = subprocess.run([sys.executable, "-m", "ops", "bench", "--sizes", "tiny", "--only", "gate", "--no-write"],
                           cwd=root, env={**env, "DATABASE_URL": database_url(), "REDIS_URL": settings.REDIS_URL,
                                          "TICKETAGENT_VAR_DIR": str(tmp_path)},
                           capture_output=True, text=True, timeout=300)
    assert bench.returncode == 0, bench.stdout[-2000:] + bench.stderr[-2000:]
    assert "per effect: gate as the pipeline calls it" in bench.stdout
