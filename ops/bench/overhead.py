"""Figure 1: the durable pipeline's throughput against a naive RQ job on the same workers."""

from __future__ import annotations

import json
import statistics
import time
from typing import TYPE_CHECKING

from django.db import connection

from ops.bench.naive import DONE_KEY, naive_item
from ops.bench.profiling import profile_pipeline
from ops.bench.workload import durable_rate, ticket_dict
from ops.samples import ticket_rows
from ticketagent.scheduling import jobs

if TYPE_CHECKING:
    from ops.bench.runner import Bench


def run(bench: Bench) -> None:
    s = bench.sizes
    bench.log(f"== 1 overhead: {s.overhead_items} tickets per run, durable pipeline vs naive job, "
              f"workers {s.overhead_workers}")
    raw = bench.results.raw.setdefault("overhead", {})
    for w in s.overhead_workers:
        invalid: list[str] = []
        procs = bench.procs.start_workers(w)
        bench.procs.wait_workers_ready(procs)
        figures = {}
        # alternate which side goes first so a drift in machine load hits both
        for kind in ("naive", "durable") if w % 2 else ("durable", "naive"):
            rows = ticket_rows(s.overhead_items, f"O{w}{kind[0].upper()}", bench.rng)
            if kind == "naive":
                figures[kind] = _naive_rate(bench, rows)
            else:
                figures[kind], figures["effects_per_item"] = durable_rate(rows, w, invalid)
            bench.log(f"  {w} worker(s) {kind:7s}: {figures[kind]:6.1f} items/s")
        bench.procs.stop_workers(procs)
        ratio = figures["durable"] / figures["naive"]
        raw[w] = {**figures, "ratio": ratio, "valid": not invalid}
        bench.results.notes += [f"overhead, {why} — this figure is not valid" for why in invalid]
    best = _bound(bench, raw[1]) if 1 in raw and raw[1]["valid"] else None
    for w, figures in raw.items():
        ratio = figures["ratio"]
        reference = f" (the reference row: {best:.2f}×)" if best is not None else ""
        bench.results.add("1", f"throughput, {w} worker{'s' if w > 1 else ''}: durable vs naive",
                          f"{figures['durable']:.1f} vs {figures['naive']:.1f} items/s = **{ratio:.2f}×**{reference}"
                          + ("" if figures["valid"] else " (INVALID, see notes)"))
    if "overhead" in bench.profile:
        profile_pipeline(bench)


def _naive_rate(bench: Bench, rows) -> float:
    """Items/s of the naive job: submit to the last job's end (each job
    records its end in Redis)."""
    n = len(rows)
    queue = jobs.get_queue()
    redis_conn = queue.connection
    redis_conn.delete(DONE_KEY)
    t0 = time.time()
    for row in rows:
        queue.enqueue(naive_item, ticket_dict(row), result_ttl=600, failure_ttl=3600)
    deadline = time.monotonic() + 60 + n * 2
    while redis_conn.llen(DONE_KEY) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"naive run: {redis_conn.llen(DONE_KEY)}/{n} done; see {bench.workdir}")
        time.sleep(0.05)
    end = max(float(x) for x in redis_conn.lrange(DONE_KEY, 0, -1))
    return n / (end - t0)


def _bound(bench: Bench, one: dict) -> float:
    """What figure 1 could be at best: the naive job plus only the durable
    writes the protocol cannot do without -- the lease, then per effect
    its intent before the call and its outcome after it, each a commit
    (the decisions and the item's end can ride along in those) -- at this
    database's cost of one single-row commit, measured now."""
    commit_ms = single_row_commit_ms()
    commits = 1 + 2 * one["effects_per_item"]
    naive_ms = 1000 / one["naive"]
    best = naive_ms / (naive_ms + commits * commit_ms)
    one["bound"] = {"commit_ms": commit_ms, "commits_per_item": commits, "ratio": best}
    bench.log(f"  bound, 1 worker: {commits:.1f} commits per item x {commit_ms:.2f} ms on top of "
              f"{naive_ms:.1f} ms -> at best {best:.2f}x")
    bench.results.add("1", "reference, 1 worker: the naive job plus only the commits the protocol requires",
                      f"{naive_ms:.1f} ms + {commits:.1f} commits × {commit_ms:.2f} ms an item = at best "
                      f"**{best:.2f}×**")
    return best


def single_row_commit_ms(n: int = 200) -> float:
    """Median time of one single-row INSERT committed by itself (the
    database's price of a durable write), on a scratch table."""
    body = json.dumps({"ticket": "T-1", "body": {"subject": "Re: your request", "body": "Thank you. " * 20}})
    with connection.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS bench_commit (id integer PRIMARY KEY, payload text NOT NULL)")
        cur.execute("DELETE FROM bench_commit")
        times = []
        for i in range(n):
            t = time.perf_counter()
            cur.execute("INSERT INTO bench_commit (id, payload) VALUES (%s, %s)", [i, body])
            times.append(time.perf_counter() - t)
        cur.execute("DROP TABLE bench_commit")
    return statistics.median(times[n // 10:]) * 1000
