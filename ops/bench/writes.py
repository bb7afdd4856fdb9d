"""Figure 7: the database's work per item, from PostgreSQL's own counts, ours and the DBOS peer's; capacity on paper.

One worker process each side, the standard tickets (ops.samples, offline
model, sandbox honouring keys, no faults), `writes_items` of them:

* **transactions** from `pg_stat_database.xact_commit` (+ `xact_rollback`):
  the delta over the worker's whole life (started after the first reading,
  stopped and gone before the second), minus the sessions opened meanwhile
  (the server counts each session's start as a transaction: `sessions`),
  and minus what the server's statement log attributes to the bench's own
  connection and to the worker before the tickets were submitted (its
  recovery pass at start);
* **statements** and **server time** from the statement log
  (ops/bench/pgstats.py): the worker's statements between submit and the
  last item's end; transaction control (BEGIN/COMMIT) counted apart; the
  server time is the statements' own durations, commit flushes included;
* the **peer's** the same way from its database's log, its queue polling
  apart: the statements its idle worker runs in a window just before the
  tickets are submitted (it polls every 10 ms whether or not there is
  work) are counted apart in the work window too, and so is a transaction
  made of nothing else; the idle rate is reported beside it.

Capacity on paper follows from our server time per item: one PostgreSQL
core executes at most 1000 / (ms per item) items/s, and a worker whose
item takes `m` seconds of model time asks for 1/m items/s.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import psutil
from django.db import connection

from ops.bench.dbos_peer import DbosPeer, dbos_database_name
from ops.bench.pgstats import (
    StatementLog,
    admin_connection,
    db_counters,
    statement_logging,
    tally,
    texts,
    wait_backends_gone,
)
from ops.processes import database_url
from ops.samples import ticket_rows
from ticketagent.channels.served import helpdesk_served
from ticketagent.scheduling import jobs
from ticketagent.services.tasks import task_create

if TYPE_CHECKING:
    from ops.bench.runner import Bench

IDLE_WINDOW = 2.0


def run(bench: Bench) -> None:
    n = bench.sizes.writes_items
    bench.log(f"== 7 writes per item: {n} tickets, one worker each side, PostgreSQL's own counts")
    raw = bench.results.raw.setdefault("writes", {})
    ours_db = connection.settings_dict["NAME"]
    admin = admin_connection(database_url())
    log, why = StatementLog.locate(admin)
    try:
        raw["ours"] = _ours(bench, admin, log, ours_db, n)
        raw["dbos"] = _dbos(bench, admin, log, n) if log is not None else None
    finally:
        admin.close()
    _record(bench, raw, n, why)


def bench_backend_pids(admin, dbname: str) -> set[int]:
    """The backends of `dbname` whose client is this process (the bench's own connections)."""
    ports = {c.laddr.port for c in psutil.Process(os.getpid()).net_connections(kind="tcp") if c.raddr}
    rows = admin.execute("SELECT pid, client_port FROM pg_stat_activity WHERE datname = %s", [dbname]).fetchall()
    return {pid for pid, port in rows if port in ports}


def _ours(bench: Bench, admin, log: StatementLog | None, dbname: str, n: int) -> dict:
    rows = ticket_rows(n, "W", bench.rng)
    connection.close()
    wait_backends_gone(admin, dbname)
    with statement_logging(admin, [dbname] if log else []):
        offset = log.offset() if log else 0
        before = db_counters(admin, dbname)
        procs = bench.procs.start_workers(1)
        bench.procs.wait_workers_ready(procs)
        # the items go to the queue of the helpdesk the task is bound to (ticketagent/scheduling/jobs.py: queue_name)
        registry = jobs.get_queue(jobs.queue_name(helpdesk_served().id)).finished_job_registry
        finished_before = registry.get_job_count()
        submitted = time.time()
        task_create(rows=rows, name="bench writes", allow_auto_close=True, failure_threshold=n + 1)
        mine = bench_backend_pids(admin, dbname)
        connection.close()  # nothing more from the bench until the second reading
        deadline = time.monotonic() + 60 + 2 * n
        while registry.get_job_count() - finished_before < n:  # Redis only: the database is not asked
            if time.monotonic() > deadline:
                raise TimeoutError(f"writes: {n} items did not end; see {bench.workdir}")
            time.sleep(0.05)
        ended = time.time()
        bench.procs.stop_workers(procs)
        wait_backends_gone(admin, dbname)
        delta = db_counters(admin, dbname) - before
    out = {"items": n, "xact_delta": delta.commits + delta.rollbacks, "active_ms": delta.active_ms,
           "sessions": delta.sessions}
    if log is not None:
        entries = log.entries(offset, dbname)
        work = tally(entries, start=submitted, end=ended + 0.5, exclude=mine)
        bench_tx = tally(entries, start=0, end=float("inf"), exclude=_others(entries, mine)).transactions
        start_pass = tally(entries, start=0, end=submitted, exclude=mine).transactions
        after = tally(entries, start=ended + 0.5, end=float("inf"), exclude=mine).transactions
        out.update({"log": work.per(n), "bench_tx": bench_tx, "worker_tx_before_submit": start_pass,
                    "worker_tx_after_end": after})
        # a session's start is a transaction of its own in these counters (the bench's, the worker's two)
        out["xact_per_item"] = (out["xact_delta"] - delta.sessions - bench_tx - start_pass) / n
    bench.log(f"  ours: {out}")
    return out


def _others(entries, mine: set[int]) -> set[int]:
    return {pid for _, pid, *_ in entries if pid not in mine}


def _dbos(bench: Bench, admin, log: StatementLog, n: int) -> dict:
    dbname = dbos_database_name()
    peer = DbosPeer(bench)
    try:
        peer.stop(peer.start(1))  # the database exists before its logging is switched on
        peer.forget_runs()
        peer.close()
        with statement_logging(admin, [dbname]):
            offset = log.offset()
            procs = peer.start(1)
            mine = {peer.backend_pid()}
            time.sleep(1.0)
            idle_from = time.time()
            time.sleep(IDLE_WINDOW)
            idle_to = time.time()
            try:
                run = peer.wait(peer.submit(ticket_rows(n, "WD", bench.rng), f"writes-{int(idle_to)}"),
                                timeout=60 + 2 * n)
            finally:
                mine |= bench_backend_pids(admin, dbname)
                peer.stop(procs)
    finally:
        peer.close()
    entries = log.entries(offset, dbname)
    polling = texts(entries, start=idle_from, end=idle_to, exclude=mine)
    idle = tally(entries, start=idle_from, end=idle_to, exclude=mine)
    work = tally(entries, start=run.submitted, end=run.ended + 0.5, exclude=mine, apart=polling)
    out = {"items": n, "statuses": run.statuses, "log": work.per(n), "polling_statements": sorted(polling),
           "polling_per_s": idle.per(idle_to - idle_from)}
    bench.log(f"  DBOS: {out}")
    return out


def _record(bench: Bench, raw: dict, n: int, why: str) -> None:
    ours = raw["ours"]
    if "log" not in ours:
        bench.results.notes.append(f"writes: statements not counted — {why}")
        tx = ours["xact_delta"] / n
        bench.results.add("7", f"transactions per item, ours ({n} tickets, pg_stat_database, including the "
                          "worker's recovery pass at start)", f"**{tx:.1f}**")
        return
    log = ours["log"]
    tx = ours["xact_per_item"]
    bench.results.add("7", f"transactions per item, ours ({n} tickets; pg_stat_database.xact_commit)",
                      f"**{tx:.1f}** (statement log: {log['transactions']:.1f})")
    bench.results.add("7", "statements per item, ours (the server's statement log; BEGIN/COMMIT apart)",
                      f"**{log['statements']:.1f}** (+ {log['tx_control']:.1f} BEGIN/COMMIT)")
    peer = raw.get("dbos")
    if peer:
        p, poll = peer["log"], peer["polling_per_s"]
        bench.results.add("7", "reference: per item, the same pipeline on DBOS Transact (its queue polling apart)",
                          f"{p['transactions']:.1f} transactions, {p['statements']:.1f} statements "
                          f"(+ {p['tx_control']:.1f} BEGIN/COMMIT), {p['server_ms']:.2f} ms server time; polling "
                          f"besides: {p['apart_transactions']:.1f} transactions an item while busy, "
                          f"{poll['transactions']:.0f}/s per idle worker")
    _capacity(bench, log["server_ms"])


def _capacity(bench: Bench, ms: float) -> None:
    per_core = 1000 / ms
    bench.results.raw["writes"]["capacity"] = {"server_ms_per_item": ms, "items_per_s_per_core": per_core,
                                               "workers_at_1s": per_core, "workers_at_10s": per_core * 10}
    bench.results.add("7", "reference: capacity on paper — our server time per item → one PostgreSQL core",
                      f"{ms:.2f} ms an item → ≤ **{per_core:.0f} items/s** a core: ≈ {per_core:.0f} workers at "
                      f"1 s of model time per item, ≈ {per_core * 10:.0f} at 10 s")
