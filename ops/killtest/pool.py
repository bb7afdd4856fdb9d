"""The kill test's workers: each started with a random crash window, killed at random and restarted."""

import random
import sys
import time
from collections import Counter

from django.db import DatabaseError, connection

from ledger.faults import WINDOWS
from ops.faultproxy import FaultProxy
from ops.processes import Child, Processes
from ticketagent.scheduling.sweep import sweep_holder


class WorkerPool:
    """`workers` worker processes and the recovery sweep, kept running as a
    supervisor would: whatever dies is started again. Each worker started
    picks its crash window and its kind (forking a work-horse per job, or
    not: then running up to `threads` items at once) at random. With `proxied`, each worker reaches PostgreSQL through a
    FaultProxy of its own (`proxies[child]`), which the slow-worker faults
    stall or cut; the sweep connects directly. A worker under such a fault
    (`spared`) is not killed at random: its waking up is the point.

    With `sweep_in_workers` there is no sweep process: the workers take turns at it (as deployed), and every
    other kill is aimed at the one that holds it; `takeovers` are the seconds from that kill until another
    worker held the sweep, and `takeovers_ready` the seconds from when another worker could take it (alive, its
    rq worker listening -- the sweep's thread starts with it -- and not paused or stalled by a fault) until one
    did: a kill rate faster than a worker's start can leave none that could."""

    def __init__(self, procs: Processes, *, workers: int, rng: random.Random, crash_probability: float,
                 worker_command: list[str], proxied: bool = False, threads: int = 1,
                 sweep_in_workers: bool = False):
        self.procs, self.n, self.rng = procs, workers, rng
        self.crash_probability = crash_probability
        self.worker_command = worker_command
        self.proxied = proxied
        self.threads = threads  # WORKER_THREADS of the in-process workers
        self.proxies: dict[Child, FaultProxy] = {}
        self.spared: set[Child] = set()
        self.crash_log = procs.log_dir / "crashes.log"
        self.workers: list[Child] = []
        self.recovery: Child | None = None
        self.wall_kills = 0
        self.modes: Counter = Counter()
        self.sweep_in_workers = sweep_in_workers
        self.takeovers: list[float] = []
        self.takeovers_ready: list[float] = []
        self._holder_killed: tuple[int, float] | None = None  # (pid, when) of a sweep holder just killed
        self._ready_since: float | None = None  # since when another worker could take the sweep
        self._listening: set[Child] = set()  # workers whose log says their rq worker listens

    def start_worker(self) -> Child:
        window = self.rng.choice(WINDOWS)
        fork = self.rng.random() < 0.5
        self.modes["forking" if fork else "in-process"] += 1
        env = {"LEDGER_CRASH_AT": f"{window}:{self.crash_probability}@{self.crash_log}",
               "WORKER_FORK": "true" if fork else "false", "WORKER_THREADS": str(self.threads)}
        proxy = None
        if self.proxied:
            proxy = FaultProxy.in_front_of(self.procs.env["DATABASE_URL"])
            proxy.start()
            env["DATABASE_URL"] = proxy.url(self.procs.env["DATABASE_URL"])
        child = self.procs.start("worker", self.worker_command, env=env)
        if proxy is not None:
            self.proxies[child] = proxy
        return child

    def _gone(self, child: Child) -> None:
        """A worker that will not run again: its proxy closes (connections cut by it die now)."""
        self.spared.discard(child)
        self._listening.discard(child)
        proxy = self.proxies.pop(child, None)
        if proxy is not None:
            proxy.close()

    def start(self) -> None:
        self.workers = [self.start_worker() for _ in range(self.n)]
        if not self.sweep_in_workers:
            self.recovery = self.procs.start("recover", [sys.executable, "manage.py", "recover", "--loop"],
                                             log=self.procs.log_dir / "recover.log")

    def kill_random(self) -> None:
        """SIGKILL one worker (not a spared one), work-horse included, and start another."""
        choices = [i for i, child in enumerate(self.workers) if child not in self.spared]
        if not choices:
            return
        i = self.rng.choice(choices)
        holder = self._holder_index(choices) if self.sweep_in_workers and self.rng.random() < 0.5 else None
        if holder is not None and self._holder_killed is None:
            i = holder
            self._holder_killed = (self.workers[i].pid, time.monotonic())
            self._ready_since = time.monotonic() if self._another_ready() else None
        self.procs.kill(self.workers[i])
        self._gone(self.workers[i])
        self.wall_kills += 1
        self.workers[i] = self.start_worker()

    def _holder_index(self, choices: list[int]) -> int | None:
        """Which of `choices` holds the sweep now (None: none of them, or the database did not say)."""
        pid = self._holder_pid()
        return next((i for i in choices if self.workers[i].pid == pid), None)

    def _holder_pid(self) -> int | None:
        try:
            holder = sweep_holder()
        except DatabaseError:
            connection.close()
            return None
        return int(holder.rsplit(":", 1)[1]) if holder else None

    def _another_ready(self) -> bool:
        """Whether a worker other than the killed holder could take the sweep now: alive, not paused or stalled by
        a fault (`spared`), and its rq worker listening (its log says so; the sweep's thread starts with it)."""
        for child in self.workers:
            if child.pid == self._holder_killed[0] or child in self.spared or child.poll() is not None:
                continue
            if child not in self._listening and child.log_path is not None and child.log_path.exists() \
                    and "*** Listening on" in child.log_path.read_text(errors="replace"):
                self._listening.add(child)
            if child in self._listening:
                return True
        return False

    def _note_takeover(self) -> None:
        """After a kill of the sweep's holder: the seconds until another worker holds it, from the kill and from
        when one could."""
        now = time.monotonic()
        if self._ready_since is None and self._another_ready():
            self._ready_since = now
        pid = self._holder_pid()
        if pid is not None and pid != self._holder_killed[0]:
            self.takeovers.append(now - self._holder_killed[1])
            self.takeovers_ready.append(now - (self._ready_since if self._ready_since is not None else now))
            self._holder_killed, self._ready_since = None, None

    def restart_dead(self) -> None:
        if self._holder_killed is not None:
            self._note_takeover()
        for i, child in enumerate(self.workers):
            if child.poll() is not None:
                self.procs.forget(child)
                self._gone(child)
                self.workers[i] = self.start_worker()
        if self.recovery is not None and self.recovery.poll() is not None:
            self.recovery = self.procs.restart(self.recovery)

    def close(self) -> None:
        for child in list(self.proxies):
            self._gone(child)

    def crash_counts(self) -> Counter:
        """Self-inflicted SIGKILLs per window, as the workers logged them."""
        if not self.crash_log.exists():
            return Counter()
        return Counter(line.strip() for line in self.crash_log.read_text().splitlines() if line.strip())
