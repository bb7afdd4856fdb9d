"""The processes a benchmark run starts: our workers (which take turns at the sweep, as deployed) and the DBOS
peer's, the sandbox, the model server.

A thin layer over ops.processes: every one of them is a child of one
`Processes`, marked, logged under the run's directory, and `stop()` leaves
nothing running (work-horses orphaned by a SIGKILLed worker included).
"""

from __future__ import annotations

import json
import secrets
import sys
import time
import urllib.request
from pathlib import Path

from ops.processes import Child, Processes
from ops.sandbox_child import start_sandbox

WORKER = [sys.executable, "manage.py", "worker"]  # as deployed: one of them holds the recovery sweep at a time

# Workers, ours and the peer's, run as deployed (docs/deploy.md): DEBUG off, so no
# query log is kept and every statement goes through the plain cursor.
DEPLOYED = {"DEBUG": "false", "SECRET_KEY": secrets.token_urlsafe(48), "ALLOWED_HOSTS": "127.0.0.1,localhost"}


def deployed(extra_env: dict | None) -> dict:
    return {**DEPLOYED, **(extra_env or {})}


class BenchProcesses:
    def __init__(self, workdir: Path, env: dict):
        self.workdir = workdir
        self.procs = Processes(env=env, log_dir=workdir)
        self.workers: list[Child] = []
        self.dbos_started: list[str] = []  # executor ids, unique over the run

    @property
    def env(self) -> dict:
        """The base environment of every process started from now on."""
        return self.procs.env

    # workers ---------------------------------------------------------------
    def start_workers(self, n: int, extra_env: dict | None = None) -> list[Child]:
        started = [self.procs.start("worker", WORKER, env=deployed(extra_env)) for _ in range(n)]
        self.workers += started
        return started

    def wait_workers_ready(self, children: list[Child], timeout: float | None = None) -> None:
        """Until every one of them registered with rq (by default 60 s + 5 s a worker: 32 of them
        importing Django and the SDK at once on two cores take a while)."""
        timeout = 60 + 5 * len(children) if timeout is None else timeout
        from rq import Worker

        from ticketagent.scheduling.jobs import get_queue

        queue = get_queue()
        pids = {c.pid for c in children}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [c for c in children if c.poll() is not None]
            if dead:
                raise RuntimeError(f"worker exited with {dead[0].returncode}; see {self.workdir}")
            registered = {w.pid for w in Worker.all(queue=queue)}
            if pids <= registered:
                return
            time.sleep(0.1)
        raise RuntimeError(f"workers did not register within {timeout:.0f}s; see {self.workdir}")

    def start_dbos_workers(self, n: int, database_url: str, extra_env: dict | None = None,
                           timeout: float = 90) -> list[Child]:
        """n worker processes of the DBOS peer, each its own executor; returns once all listen."""
        started = []  # (the worker drops DBOS__* variables itself: never DBOS Cloud)
        try:
            for _ in range(n):
                executor = f"peer-{len(self.dbos_started) + 1}"
                self.dbos_started.append(executor)
                started.append(self.procs.start("dbos-worker", dbos_worker_command(
                    database_url=database_url, executor_id=executor), env=deployed(extra_env)))
            for child in started:
                child.wait_line(lambda text: '"dbos_ready"' in text, timeout=timeout)
        except BaseException:
            self.stop_other_all(started)
            raise
        return started

    def stop_other_all(self, children: list[Child]) -> None:
        self.procs.stop(children, grace=15, descendants=False)

    def kill_worker(self, child: Child) -> None:
        """SIGKILL a worker and its work-horse, as a crash would."""
        self.procs.kill(child)
        self.workers.remove(child)

    def stop_workers(self, children: list[Child] | None = None) -> None:
        children = list(self.workers if children is None else children)
        self.procs.stop(children, grace=15)
        self.workers = [c for c in self.workers if c not in children]

    # other processes -------------------------------------------------------
    def start_model_server(self, latency: float, *, rpm: int = 0, spread: float = 0.0) -> tuple[Child, str]:
        """The fake model as a process of its own (ops.fake_model; `rpm`: 429s past that many requests a
        minute; `spread`: each answer's latency drawn from latency x (1 ± spread)); returns it and its base URL."""
        child = self.procs.start("model-server", [sys.executable, "-m", "ops.fake_model", "--latency", str(latency),
                                                  "--spread", str(spread), "--rpm", str(rpm)])
        try:
            line = child.wait_line(lambda text: text.startswith("{") and '"port"' in text, timeout=30)
        except RuntimeError:
            self.stop_other(child)
            raise
        return child, f"http://127.0.0.1:{json.loads(line)['port']}/v1"

    @staticmethod
    def model_calls(base_url: str) -> dict:
        """What the fake model (`start_model_server`) has answered so far: completions, rate_limited."""
        url = base_url.removesuffix("/v1") + "/_bench/counts"
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=5) as answer:
            return json.loads(answer.read())

    def start_sandbox(self, *, ignore_keys: bool = False, name: str = "sandbox") -> tuple[str, int]:
        sandbox = start_sandbox(self.procs, db=self.workdir / f"{name}.sqlite3", ignore_keys=ignore_keys, quiet=True)
        return sandbox.url, sandbox.smtp_port

    def stop_other(self, child: Child) -> None:
        self.procs.stop([child], grace=10, descendants=False)

    def stop(self) -> None:
        self.procs.stop(grace=15)
        self.workers = []


def dbos_worker_command(*, database_url: str, executor_id: str, polling: float = 0.01) -> list[str]:
    """The command line of one worker of the benchmark's DBOS peer (ops/bench/dbos_worker.py)."""
    return [sys.executable, "-m", "ops.bench.dbos_worker", "--database-url", database_url,
            "--executor-id", executor_id, "--polling", str(polling)]
