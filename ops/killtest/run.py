"""The kill test: "nothing twice, nothing lost" under SIGKILL.

A harness that runs batches through real worker processes while killing
them, then compares what the sandbox helpdesk received with the ledger:

* workers SIGKILL themselves at injected points around external calls
  (before intent, after intent, after the call, after commit; one window
  chosen at random each time a worker starts), and the harness SIGKILLs
  whole workers (parent and work-horse) at random wall-clock moments, then
  restarts them as a supervisor would; each worker started runs its jobs
  in its own process or forks a work-horse per job (`WORKER_FORK`), at
  random, so both kinds are killed;
* optionally the queue's Redis database is flushed and PostgreSQL connections
  are terminated;
* every task is driven to an end: suspended tasks are resumed, unknown
  effects settle by reconcile, and for a channel without look-up the
  harness plays the operator, asking the sandbox (the oracle) and
  recording a review decision;
* at the end, per effect key: `once`/`irreversible` effects were delivered
  at most once, every committed effect was delivered, every delivery has a
  committed row, no effect is left in `intent`, and every item is done.
"""

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from django.conf import settings
from django.db import connection
from django.utils import timezone

from ledger.faults import WINDOWS
from ledger.models import BlockedDuplicate, Effect, EffectState
from ledger.services import effect_review, reconcile_not_before
from ops.processes import database_url, kill_tree
from ops.samples import ticket_rows
from ticketagent.models import Event, EventType, ItemStatus, Task, TaskStatus
from ticketagent.sandbox.client import SandboxClient, start_sandbox, stop_sandbox
from ticketagent.services import ServiceError, task_create, task_resume

ROOT = Path(settings.BASE_DIR)
FAST_ENV = {
    "LEASE_SECONDS": "2",
    "HEARTBEAT_SECONDS": "0.4",
    "RECOVER_INTERVAL_SECONDS": "0.3",
    "REQUEUE_GRACE_SECONDS": "1.5",
    "HELPDESK_CONNECT_TIMEOUT": "1",
    "HELPDESK_READ_TIMEOUT": "2",
    "EMAIL_TIMEOUT": "2",
    "OPENAI_API_KEY": "",
}


@dataclass
class Report:
    rounds: int = 0
    items: int = 0
    kills: Counter = field(default_factory=Counter)
    committed: int = 0
    delivered: int = 0
    duplicates: int = 0
    lost_items: int = 0
    reconciled: int = 0
    reviewed: int = 0
    resumes: int = 0
    blocked: int = 0
    faults: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    worker_starts: Counter = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.problems

    def table(self) -> str:
        kills = ", ".join(f"{w} {self.kills[w]}" for w in (*WINDOWS, "wall-clock")) or "none"
        rows = [
            ("rounds", self.rounds),
            ("kills per window", kills),
            ("worker starts", ", ".join(f"{k} {v}" for k, v in sorted(self.worker_starts.items())) or "none"),
            ("items", self.items),
            ("effects committed", self.committed),
            ("deliveries", self.delivered),
            ("duplicates (once/irreversible)", self.duplicates),
            ("lost items", self.lost_items),
            ("unknown -> reconciled", self.reconciled),
            ("unknown -> reviewed (needed a human)", self.reviewed),
            ("resumes", self.resumes),
            ("blocked duplicates", self.blocked),
            ("faults injected", ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"),
            ("wall time", f"{self.seconds:.1f} s"),
            ("result", "PASS" if self.ok else f"FAIL ({len(self.problems)} problem(s))"),
        ]
        width = max(len(k) for k, _ in rows)
        lines = [f"{k:<{width}}  {v}" for k, v in rows]
        bar = "-" * max(len(line) for line in lines)
        return "\n".join([bar, *lines, bar])


class Supervisor:
    """Starts, kills and restarts worker processes; runs the recovery sweep."""

    def __init__(self, *, workers: int, env: dict, rng: random.Random, workdir: Path, crash_probability: float,
                 worker_command: list[str]):
        self.n, self.env, self.rng, self.workdir = workers, env, rng, workdir
        self.crash_probability = crash_probability
        self.worker_command = worker_command
        self.crash_log = workdir / "crashes.log"
        self.procs: list[subprocess.Popen] = []
        self.recovery: subprocess.Popen | None = None
        self.wall_kills = 0
        self.started = 0
        self.modes: Counter = Counter()

    def _start_worker(self) -> subprocess.Popen:
        window = self.rng.choice(WINDOWS)
        fork = self.rng.random() < 0.5
        self.modes["forking" if fork else "in-process"] += 1
        env = {**self.env, "LEDGER_CRASH_AT": f"{window}:{self.crash_probability}",
               "LEDGER_CRASH_LOG": str(self.crash_log), "WORKER_FORK": "true" if fork else "false"}
        self.started += 1
        log = open(self.workdir / f"worker-{self.started}.log", "w")
        return subprocess.Popen(self.worker_command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def start(self) -> None:
        self.procs = [self._start_worker() for _ in range(self.n)]
        log = open(self.workdir / "recover.log", "w")
        self.recovery = subprocess.Popen([sys.executable, "manage.py", "recover", "--loop"], cwd=ROOT, env=self.env,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill_random(self) -> None:
        i = self.rng.randrange(len(self.procs))
        kill_tree(self.procs[i])
        self.wall_kills += 1
        self.procs[i] = self._start_worker()

    def restart_dead(self) -> None:
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                self.procs[i] = self._start_worker()
        if self.recovery is not None and self.recovery.poll() is not None:
            log = open(self.workdir / "recover.log", "a")
            self.recovery = subprocess.Popen([sys.executable, "manage.py", "recover", "--loop"], cwd=ROOT,
                                             env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True)

    def crash_counts(self) -> Counter:
        if not self.crash_log.exists():
            return Counter()
        return Counter(line.strip() for line in self.crash_log.read_text().splitlines() if line.strip())

    def stop(self) -> None:
        for proc in [*self.procs, self.recovery]:
            if proc is not None and proc.poll() is None:
                kill_tree(proc, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in [*self.procs, self.recovery]:
            if proc is None:
                continue
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                kill_tree(proc)
        # work-horses orphaned by wall-clock kills of their parent
        for p in psutil.process_iter(["environ"]):
            try:
                if (p.info["environ"] or {}).get("TICKETAGENT_KILLTEST") == str(self.workdir):
                    p.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass


def _play_operator(task: Task, sandbox: SandboxClient, report: Report) -> None:
    """For unknown effects on channels without look-up: ask the oracle."""
    now = timezone.now()
    for effect in Effect.objects.filter(owner_task=str(task.pk), state=EffectState.UNKNOWN, channel="email"):
        if now < reconcile_not_before(effect):
            continue  # the call it guards may still be in flight
        happened = bool(sandbox.deliveries(key=effect.idempotency_key))
        effect_review(effect_id=effect.pk, verdict="happened" if happened else "not_happened",
                      reason="kill test: the sandbox (oracle) was asked", actor="killtest")
        report.reviewed += 1


def _inject_faults(kinds: set[str], rng: random.Random, report: Report, redis_conn) -> None:
    if "redis" in kinds and rng.random() < 0.5:
        redis_conn.flushdb()  # the queue's database only: a shared Redis keeps its other data
        report.faults["redis flush"] += 1
    if "postgres" in kinds and connection.vendor == "postgresql" and rng.random() < 0.5:
        with connection.cursor() as cur:
            cur.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        report.faults["postgres terminate"] += 1


def _drive_round(task: Task, *, sup: Supervisor, sandbox, rng, report, faults: set[str], redis_conn,
                 timeout: float, kill_every: tuple[float, float]) -> None:
    deadline = time.monotonic() + timeout
    next_kill = time.monotonic() + rng.uniform(*kill_every)
    next_fault = time.monotonic() + rng.uniform(1.0, 3.0)
    calm_after = time.monotonic() + timeout / 3  # stop killing so the round can settle
    while time.monotonic() < deadline:
        now = time.monotonic()
        if now < calm_after and now >= next_kill:
            sup.kill_random()
            next_kill = now + rng.uniform(*kill_every)
        if faults and now < calm_after and now >= next_fault:
            try:
                _inject_faults(faults, rng, report, redis_conn)
            except Exception as exc:  # noqa: BLE001 - a fault that fails to inject is not a finding
                print(f"fault injection failed: {exc}", file=sys.stderr)
            connection.close()
            next_fault = now + rng.uniform(1.0, 3.0)
        sup.restart_dead()
        try:
            task.refresh_from_db()
            _play_operator(task, sandbox, report)
            if task.status in (TaskStatus.SUSPENDED, TaskStatus.PAUSED) or (
                    task.status == TaskStatus.NEEDS_REVIEW and task.items.filter(status=ItemStatus.FAILED).exists()):
                try:
                    task_resume(task_id=task.pk, actor="killtest")
                except ServiceError:
                    pass
            elif task.status == TaskStatus.COMPLETED:
                return
        except Exception as exc:  # noqa: BLE001 - e.g. our own connection was terminated by a fault
            print(f"driver: {type(exc).__name__}: {exc}", file=sys.stderr)
            connection.close()
        time.sleep(0.2)


def _all_deliveries(sandbox: SandboxClient) -> Counter:
    return Counter(d["key"] for d in sandbox.deliveries(limit=1_000_000) if d.get("key"))


def _check_deliveries(effects: dict, deliveries: Counter, report: Report, where: str) -> None:
    for key, n in deliveries.items():
        effect = effects.get(key)
        if effect is None:
            report.problems.append(f"{where}: delivery with key {key[:12]} has no ledger row")
            continue
        if n > 1 and effect.effect_class in ("once", "irreversible"):
            report.duplicates += n - 1
            report.problems.append(f"{where}: {effect.action} for item {effect.owner_item} delivered {n} times")
        if effect.state != EffectState.COMMITTED:
            report.problems.append(f"{where}: {effect.action} item {effect.owner_item} was delivered but the "
                                   f"ledger says {effect.state}")


def _check_run(task_ids: list[int], sandbox: SandboxClient, report: Report) -> None:
    """At the end: deliveries that arrived after their round was checked must
    still match the ledger."""
    effects = {e.idempotency_key: e for e in Effect.objects.filter(owner_task__in=[str(t) for t in task_ids])}
    deliveries = _all_deliveries(sandbox)
    final = Report()
    _check_deliveries(effects, deliveries, final, "whole run")
    seen = {p.split(": ", 1)[1] for p in report.problems}
    report.problems += [p for p in final.problems if p.split(": ", 1)[1] not in seen]
    report.duplicates = max(report.duplicates, final.duplicates)
    report.delivered = sum(deliveries.values())


def _check_round(task: Task, sandbox: SandboxClient, report: Report) -> None:
    effects = {e.idempotency_key: e for e in Effect.objects.filter(owner_task=str(task.pk))}
    deliveries = Counter({k: n for k, n in _all_deliveries(sandbox).items() if k in effects})
    report.items += task.items.count()
    _check_deliveries(effects, deliveries, report, f"task {task.pk}")
    for key, effect in effects.items():
        if effect.state == EffectState.COMMITTED and key not in deliveries:
            report.problems.append(f"task {task.pk}: {effect.action} item {effect.owner_item} committed but never "
                                   "delivered")
        if effect.state == EffectState.INTENT:
            report.problems.append(f"task {task.pk}: {effect.action} item {effect.owner_item} left in intent")
    not_done = task.items.exclude(status=ItemStatus.DONE)
    if not_done.exists():
        report.lost_items += not_done.count()
        sample = ", ".join(f"{i.ticket_id}={i.status}" for i in not_done[:5])
        report.problems.append(f"task {task.pk}: {not_done.count()} item(s) not done ({sample}); "
                               f"task is {task.status}")
    report.committed += sum(1 for e in effects.values() if e.state == EffectState.COMMITTED)
    report.delivered += sum(deliveries.values())
    report.reconciled += sum(1 for e in effects.values() if e.resolved_by == "reconcile")
    report.resumes += Event.objects.filter(task=task, type=EventType.RESUMED).count()
    report.blocked += BlockedDuplicate.objects.filter(owner_task=str(task.pk)).count()


def run_killtest(*, rounds: int, items: int, workers: int, seed: int, sandbox_keys: str = "honor",
                 channel: str = "helpdesk", faults: set[str] | None = None, crash_probability: float = 0.1,
                 round_timeout: float = 120.0, kill_every: tuple[float, float] = (0.5, 2.0),
                 worker_command: list[str] | None = None, out=sys.stdout) -> Report:
    """Run the kill test. `worker_command` starts one worker (default:
    `manage.py worker`); the self-test passes one with a broken gate."""
    import redis

    faults = faults or set()
    rng = random.Random(seed)
    report = Report()
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="killtest-"))
    proc, url, smtp_port = start_sandbox(workdir, ignore_keys=sandbox_keys == "ignore")
    sandbox = SandboxClient(url)
    env = {**os.environ, **FAST_ENV, "DATABASE_URL": database_url(), "REDIS_URL": settings.REDIS_URL,
           "RQ_QUEUE": settings.RQ_QUEUE, "HELPDESK_URL": url, "EMAIL_HOST": "127.0.0.1", "EMAIL_PORT": str(smtp_port),
           "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend", "PYTHONUNBUFFERED": "1",
           "TICKETAGENT_KILLTEST": str(workdir),
           "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "ticketagent.settings")}
    settings.HELPDESK_URL, settings.EMAIL_PORT = url, smtp_port
    redis_conn = redis.Redis.from_url(settings.REDIS_URL)
    sup = Supervisor(workers=workers, env=env, rng=rng, workdir=workdir, crash_probability=crash_probability,
                     worker_command=worker_command or [sys.executable, "manage.py", "worker"])
    try:
        sup.start()
        sandbox.set_faults(honor_keys=sandbox_keys == "honor")
        task_ids = []
        for round_no in range(1, rounds + 1):
            task = task_create(rows=ticket_rows(items, f"K{round_no}", rng),
                               name=f"kill test round {round_no} (seed {seed})", allow_auto_close=True,
                               notify_channel=channel, failure_threshold=items + 1)
            _drive_round(task, sup=sup, sandbox=sandbox, rng=rng, report=report, faults=faults,
                         redis_conn=redis_conn, timeout=round_timeout, kill_every=kill_every)
            # let in-flight work settle before counting
            time.sleep(0.5)
            task.refresh_from_db()
            task_ids.append(task.pk)
            _check_round(task, sandbox, report)
            report.rounds += 1
            out.write(f"round {round_no}/{rounds}: task {task.pk} {task.status}, "
                      f"{len(report.problems)} problem(s) so far\n")
            out.flush()
        time.sleep(2)  # anything still in flight lands before the last look
        _check_run(task_ids, sandbox, report)
    finally:
        sup.stop()
        stop_sandbox(proc)
    report.kills = sup.crash_counts()
    report.kills["wall-clock"] = sup.wall_kills
    report.worker_starts = sup.modes
    report.seconds = time.monotonic() - started
    return report
