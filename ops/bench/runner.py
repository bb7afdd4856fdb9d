"""The benchmark run (`python -m ops bench`): what the figures share, the chosen sections in order, the results.

Every figure is a ratio or a distribution taken in the same run, so a busy
machine slows both sides of a comparison alike. Nothing here asserts a
time: the table says which targets were met.

Sections (names for `--only`), one module each:

    overhead   durable pipeline vs a naive RQ job, 1/2/4 workers (items/s, ratio)
    gate       time per effect through the gate vs one INSERT + one UPDATE
    latency    throughput against a model answering in 1 s, RSS per worker
    kill       SIGKILL of a worker mid-item -> the item runs again elsewhere
    dashboard  p50/p95 server time of four pages over 100k items / 300k effects
    dryrun     dry-run of a 10k-item task
    replay     replay of 100k events
    peer       ours vs the same pipeline on DBOS Transact, 1/2/4 workers (items/s, ratio)
    writes     transactions, statements and server time per item (PostgreSQL's own counts), ours and
               the peer's; what one PostgreSQL core sustains
    upload     10k (and 50k) tickets through the upload page: seconds, RSS growth, Redis round trips
    fairness   a small task behind a 10k-item one: first start, completion vs alone; cancel
    unknowns   10% dropped connections, 10% 503s: unknown -> settled per cause; duplicates, ours and the peer's
    window     the window that remains: a call's last lease check -> its request's bytes leave
    inflight   items in flight per process: 1 process x WORKER_THREADS 50/100/200, today's 8/16 processes,
               DBOS at the same concurrency, against a model at 2 s per call (items/s vs C / 6 s, RSS)
    ratelimit  1,000 tickets against a model allowing 600 requests a minute: time vs the limit's bound, 429s
    fleet      the whole fleet (one worker, the sweep inside) vs one DBOS process at 8 and 100 in flight, model
               0.5 s a call: RSS and PSS, items/s and CPU an item; one process at 100 with 2 s a call vs ideal

The runner uses the configured database and Redis as they are: the command
(`ops/management/commands/bench.py`) is what points them at a dedicated
bench database and Redis DB first.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.test import override_settings

from ops.bench import (
    dashboard,
    dataset,
    dryrun,
    fairness,
    fleet,
    gate,
    inflight,
    kill,
    latency,
    overhead,
    peer,
    ratelimit,
    replay,
    unknowns,
    upload,
    window,
    writes,
)
from ops.bench.children import BenchProcesses
from ops.bench.machine import cpu_probe, load_average, machine_info
from ops.bench.results import Results
from ops.bench.sizes import Sizes
from ops.processes import database_url

SECTIONS = ("overhead", "gate", "latency", "kill", "dashboard", "dryrun", "replay", "peer", "writes", "upload",
            "fairness", "unknowns", "window", "inflight", "ratelimit", "fleet")
DATASET_SECTIONS = ("dashboard", "dryrun", "replay")
RUN = {"overhead": overhead.run, "gate": gate.run, "latency": latency.run, "kill": kill.run,
       "dashboard": dashboard.run, "dryrun": dryrun.run, "replay": replay.run, "peer": peer.run,
       "writes": writes.run, "upload": upload.run, "fairness": fairness.run, "unknowns": unknowns.run,
       "window": window.run, "inflight": inflight.run, "ratelimit": ratelimit.run,
       "fleet": fleet.run}


def product_settings() -> str:
    """The settings the bench's workers run: this process's, without the ops app of `ops.settings`."""
    name = os.environ.get("DJANGO_SETTINGS_MODULE", "ticketagent.settings")
    return "ticketagent.settings" if name == "ops.settings" else name


class Bench:
    """One run: its sizes, its sections, the processes it started and the results."""

    def __init__(self, *, sizes: Sizes, only=SECTIONS, out=sys.stdout, profile: set[str] | None = None,
                 reuse_dataset: bool = False, seed: int = 7):
        self.sizes = sizes
        self.only = tuple(s for s in SECTIONS if s in only)
        self.out = out
        self.profile = profile or set()
        self.reuse_dataset = reuse_dataset
        self.rng = random.Random(seed)
        self.results = Results(sizes=sizes)
        self.workdir = Path(tempfile.mkdtemp(prefix="ticketagent-bench-"))
        self.profile_dir = Path(settings.VAR_DIR) / "bench"
        env = {k: v for k, v in os.environ.items()}
        env.update({
            # the product's settings, not the bench's own (`ops.settings` adds only the ops app)
            "DJANGO_SETTINGS_MODULE": product_settings(),
            "DATABASE_URL": database_url(), "REDIS_URL": settings.REDIS_URL, "RQ_QUEUE": settings.RQ_QUEUE,
            "PYTHONUNBUFFERED": "1", "OPENAI_API_KEY": "",
            "NO_PROXY": "127.0.0.1,localhost",
        })
        self.procs = BenchProcesses(self.workdir, env)
        self.sandbox_url = ""

    def log(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def run(self) -> Results:
        started = time.monotonic()
        self.results.machine = machine_info()
        self.log(f"bench ({self.sizes.name}): {', '.join(self.only)}; logs in {self.workdir}")
        try:
            self.flush_redis()
            if any(s in self.only for s in DATASET_SECTIONS):
                dataset.load(self)
            else:
                dataset.clear_runs()
            if {"overhead", "latency", "kill", "peer", "writes", "upload", "fairness", "inflight",
                 "ratelimit", "fleet"} & set(self.only):
                self._start_sandbox()
            for section in self.only:
                dataset.analyze()  # each section on vacuumed tables, whatever the earlier ones left dead
                RUN[section](self)
        finally:
            self.procs.stop()
            self.flush_redis()
        self.results.machine["load average at end"] = load_average()
        self.results.machine["one core, 10M-step Python loop, at end"] = cpu_probe()
        self.results.seconds = time.monotonic() - started
        return self.results

    def _start_sandbox(self) -> None:
        url, smtp_port = self.procs.start_sandbox()
        self.sandbox_url = url
        self.procs.env.update({"HELPDESK_URL": url, "EMAIL_HOST": "127.0.0.1", "EMAIL_PORT": str(smtp_port)})
        override_settings(HELPDESK_URL=url, EMAIL_PORT=smtp_port).enable()  # for the bench's whole run

    def flush_redis(self) -> None:
        import redis

        try:
            redis.Redis.from_url(settings.REDIS_URL).flushdb()
        except redis.RedisError as exc:
            self.log(f"  (could not flush the bench Redis DB: {exc})")
