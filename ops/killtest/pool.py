"""The kill test's workers: each started with a random crash window, killed at random and restarted."""

import random
import sys
from collections import Counter

from ledger.faults import WINDOWS
from ops.processes import Child, Processes


class WorkerPool:
    """`workers` worker processes and the recovery sweep, kept running as a
    supervisor would: whatever dies is started again. Each worker started
    picks its crash window and its kind (forking a work-horse per job, or
    not) at random."""

    def __init__(self, procs: Processes, *, workers: int, rng: random.Random, crash_probability: float,
                 worker_command: list[str]):
        self.procs, self.n, self.rng = procs, workers, rng
        self.crash_probability = crash_probability
        self.worker_command = worker_command
        self.crash_log = procs.log_dir / "crashes.log"
        self.workers: list[Child] = []
        self.recovery: Child | None = None
        self.wall_kills = 0
        self.modes: Counter = Counter()

    def start_worker(self) -> Child:
        window = self.rng.choice(WINDOWS)
        fork = self.rng.random() < 0.5
        self.modes["forking" if fork else "in-process"] += 1
        env = {"LEDGER_CRASH_AT": f"{window}:{self.crash_probability}", "LEDGER_CRASH_LOG": str(self.crash_log),
               "WORKER_FORK": "true" if fork else "false"}
        return self.procs.start("worker", self.worker_command, env=env)

    def start(self) -> None:
        self.workers = [self.start_worker() for _ in range(self.n)]
        self.recovery = self.procs.start("recover", [sys.executable, "manage.py", "recover", "--loop"],
                                         log=self.procs.log_dir / "recover.log")

    def kill_random(self) -> None:
        """SIGKILL one worker, work-horse included, and start another."""
        i = self.rng.randrange(len(self.workers))
        self.procs.kill(self.workers[i])
        self.wall_kills += 1
        self.workers[i] = self.start_worker()

    def restart_dead(self) -> None:
        for i, child in enumerate(self.workers):
            if child.poll() is not None:
                self.procs.forget(child)
                self.workers[i] = self.start_worker()
        if self.recovery is not None and self.recovery.poll() is not None:
            self.recovery = self.procs.restart(self.recovery)

    def crash_counts(self) -> Counter:
        """Self-inflicted SIGKILLs per window, as the workers logged them."""
        if not self.crash_log.exists():
            return Counter()
        return Counter(line.strip() for line in self.crash_log.read_text().splitlines() if line.strip())
