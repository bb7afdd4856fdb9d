"""The kill test's rounds: start the helpdesk (sandbox or a private RT) and the workers, drive each task to an end."""

import os
import random
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.test.utils import override_settings

from ledger.models import Effect
from ops.gateway import Gateway
from ops.killtest.checks import SandboxOracle
from ops.killtest.operator import Operator
from ops.killtest.pool import WorkerPool
from ops.killtest.report import Report
from ops.killtest.rt import RTOracle
from ops.killtest.slow import SLOW_FAULTS, WORKER_FAULTS, SlowFaults
from ops.processes import Processes, database_url
from ops.rt_server import OTHER_QUEUE, start_rt_server, stop_rt_server
from ops.samples import ticket_rows
from ops.sandbox_child import start_sandbox
from sandbox.client import SandboxClient
from ticketagent.models import Approval, ItemStatus, Task, TaskStatus
from ticketagent.playbooks.files import spec_from_file
from ticketagent.playbooks.services import playbook_import
from ticketagent.services import ServiceError
from ticketagent.services.items import item_approve
from ticketagent.services.resume import task_resume
from ticketagent.services.tasks import task_create

# Short leases, so that rounds stay short; a worker calls out only while its
# lease covers the whole call (the channel's timeouts + the margin), hence
# short timeouts too. The gateway fault delivers a request 4 s after its 504:
# the in-flight bound covers it.
FAST_ENV = {
    "LEASE_SECONDS": "4",
    "RECOVER_INTERVAL_SECONDS": "0.3",
    "HELPDESK_CONNECT_TIMEOUT": "0.5",
    "HELPDESK_READ_TIMEOUT": "1.5",
    "HELPDESK_UPSTREAM_TIMEOUT": "6",
    "EMAIL_TIMEOUT": "1",
    "OPENAI_API_KEY": "",
}
# Request Tracker answers slower, and an RT action is several requests (a read may be asked again): its
# longest call is three times connect + read (9 s), and the lease exceeds it + the margin + a heartbeat (1 + 1.2 s).
RT_ENV = {"LEASE_SECONDS": "12", "HELPDESK_CONNECT_TIMEOUT": "0.5", "HELPDESK_READ_TIMEOUT": "2.5"}
CHANNELS = ("helpdesk", "email", "rt")
FAULTS = ("redis", "postgres", *SLOW_FAULTS)


def _inject_faults(kinds: set[str], rng: random.Random, report: Report, redis_conn) -> None:
    if "redis" in kinds and rng.random() < 0.5:
        redis_conn.flushdb()  # the queue's database only: a shared Redis keeps its other data
        report.faults["redis flush"] += 1
    if "postgres" in kinds and rng.random() < 0.5:
        with connection.cursor() as cur:
            cur.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        report.faults["postgres terminate"] += 1


@dataclass
class Harness:
    """What a round is driven with."""

    pool: WorkerPool
    oracle: SandboxOracle | RTOracle
    rng: random.Random
    report: Report
    faults: set[str]
    redis_conn: object
    timeout: float
    kill_every: tuple[float, float]
    slow: SlowFaults | None = None
    round_faults: tuple[str, ...] = ()  # the slow-worker faults, one per round in turn
    playbook_version: object = None  # the tasks' playbook version (None: the shipped one)
    rehearsals: bool = False  # each round also rehearses its tickets: nothing may be sent for them
    operator: Operator | None = None  # a person clicking Reconcile now and recording verdicts at random moments


def _slow_fault(h: Harness, kind: str, now: float, next_slow: float, calm_after: float) -> float:
    """Tend the round's slow-worker fault; when the next one may start."""
    h.slow.tick()
    if now >= calm_after:
        h.slow.calm()
        return next_slow
    if h.slow.busy():
        return now + 0.5  # the next one half a second after this one ends
    if now >= next_slow:
        h.slow.inject(kind)
    return next_slow


def _drive_round(task: Task, h: Harness, kind: str = "") -> None:
    """Kill, inject faults and play the operator until the task completes or
    the round's time is up (killing stops after a third of it, so the round
    can settle). `kind`: the round's slow-worker fault, if any."""
    deadline = time.monotonic() + h.timeout
    next_kill = time.monotonic() + h.rng.uniform(*h.kill_every)
    next_fault = time.monotonic() + h.rng.uniform(1.0, 3.0)
    calm_after = time.monotonic() + h.timeout / 3
    next_slow = 0.0
    if h.slow is not None:  # (no draw without it: a seed's run without slow faults stays what it was)
        next_slow = time.monotonic() + h.rng.uniform(0.2, 1.0)
        h.slow.round_started(kind)
    while time.monotonic() < deadline:
        now = time.monotonic()
        if h.slow is not None:
            next_slow = _slow_fault(h, kind, now, next_slow, calm_after)
        if now < calm_after and now >= next_kill:
            h.pool.kill_random()
            next_kill = now + h.rng.uniform(*h.kill_every)
        if h.faults & {"redis", "postgres"} and now < calm_after and now >= next_fault:
            try:
                _inject_faults(h.faults, h.rng, h.report, h.redis_conn)
            except Exception as exc:  # noqa: BLE001 - a fault that fails to inject is not a finding
                print(f"fault injection failed: {exc}", file=sys.stderr)
            connection.close()
            next_fault = now + h.rng.uniform(1.0, 3.0)
        h.pool.restart_dead()
        if _tend(task, h):
            return
        time.sleep(0.2)


def _approve_waiting(task: Task, h: Harness) -> None:
    """Play the operator on what the playbook held for approval: approve, or reject and do the rest, at random
    (every item must end done: a stopped item would count as lost)."""
    for item_id in task.items.filter(status=ItemStatus.WAITING_APPROVAL).values_list("pk", flat=True):
        approved = h.rng.random() < 0.5
        try:
            item_approve(item_id=item_id, decision=Approval.APPROVED if approved else Approval.REJECTED,
                         reason="kill test: the operator decided", actor="killtest")
        except ServiceError:
            continue  # it moved meanwhile
        h.report.approvals["approved" if approved else "rejected"] += 1


def _tend(task: Task, h: Harness) -> bool:
    """Play the operator for the task once; True when it has completed."""
    try:
        task.refresh_from_db()
        h.oracle.play_operator(task, h.report)
        if h.operator is not None:
            h.operator.play(task)
        _approve_waiting(task, h)
        if task.status in (TaskStatus.SUSPENDED, TaskStatus.PAUSED) or (
                task.status == TaskStatus.NEEDS_REVIEW and task.items.filter(status=ItemStatus.FAILED).exists()):
            try:
                task_resume(task_id=task.pk, actor="killtest")
            except ServiceError:
                pass
        elif task.status == TaskStatus.COMPLETED:
            return True
    except Exception as exc:  # noqa: BLE001 - e.g. our own connection was terminated by a fault
        print(f"driver: {type(exc).__name__}: {exc}", file=sys.stderr)
        connection.close()
    return False


def _rehearsed(rehearsal: Task, h: Harness, deadline: float) -> None:
    """After a round: its rehearsal driven to its end, then checked: every item done, not one effect."""
    while time.monotonic() < deadline and not _tend(rehearsal, h):
        h.pool.restart_dead()
        time.sleep(0.2)
    rehearsal.refresh_from_db()
    h.report.rehearsal_items += rehearsal.items.count()
    sent = Effect.objects.filter(owner_task=str(rehearsal.pk)).count()
    if sent:
        h.report.problems.append(f"rehearsal task {rehearsal.pk}: {sent} effect(s) in the ledger; it sends nothing")
    not_done = rehearsal.items.exclude(status=ItemStatus.DONE).count()
    if not_done:
        h.report.lost_items += not_done
        h.report.problems.append(f"rehearsal task {rehearsal.pk}: {not_done} item(s) not done")


def _run_rounds(h: Harness, *, rounds: int, items: int, seed: int, channel: str, out) -> None:
    task_ids = []
    for round_no in range(1, rounds + 1):
        rows = h.oracle.create_tickets(ticket_rows(items, f"K{round_no}", h.rng))
        options = {"allow_auto_close": True, "notify_channel": "email" if channel == "email" else "helpdesk",
                   "failure_threshold": items + 1, "playbook_version": h.playbook_version}
        rehearsal = task_create(rows=rows, name=f"kill test round {round_no} rehearsal (seed {seed})",
                                rehearsal=True, **options) if h.rehearsals else None
        task = task_create(rows=rows, name=f"kill test round {round_no} (seed {seed})", **options)
        kind = h.round_faults[(round_no - 1) % len(h.round_faults)] if h.round_faults else ""
        if kind:
            h.report.round_faults[task.pk] = kind
        _drive_round(task, h, kind)
        if rehearsal is not None:
            _rehearsed(rehearsal, h, time.monotonic() + h.timeout)
            task_ids.append(rehearsal.pk)  # a delivery keyed by one of its (absent) effects is a finding
        # let in-flight work settle before counting: a slow worker wakes up and what it sends lands
        _settle_slow(h)
        time.sleep(0.5)
        task.refresh_from_db()
        task_ids.append(task.pk)
        h.oracle.check_round(task, h.report)
        h.report.rounds += 1
        out.write(f"round {round_no}/{rounds}: task {task.pk} {task.status}, "
                  f"{len(h.report.problems)} problem(s) so far\n")
        out.flush()
    time.sleep(2)  # anything still in flight lands before the last look
    h.oracle.check_run(task_ids, h.report)


def _settle_slow(h: Harness) -> None:
    """A slow worker still paused, stalled or cut wakes up before the round is checked, and what it sends then
    lands (one round's fault does not run on into the next)."""
    if h.slow is None or not h.slow.busy():
        return
    h.slow.calm()
    waited = time.monotonic()
    while h.slow.busy() and time.monotonic() - waited < h.slow.seconds + 5:
        h.slow.tick()
        h.pool.restart_dead()
        time.sleep(0.2)
    h.slow.finish()
    time.sleep(float(FAST_ENV["HELPDESK_CONNECT_TIMEOUT"]) + float(FAST_ENV["HELPDESK_READ_TIMEOUT"]) + 1)


def child_env(helpdesk: dict) -> dict:
    """The workers' and the sweep's environment: this database and queue, the helpdesk, short leases."""
    return {**os.environ, **FAST_ENV, **helpdesk, "DATABASE_URL": database_url(), "REDIS_URL": settings.REDIS_URL,
            "RQ_QUEUE": settings.RQ_QUEUE,
            "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "ticketagent.settings")}


def _start_sandbox(procs: Processes, stack: ExitStack, sandbox_keys: str,
                   helpdesk_faults: dict | None = None) -> tuple[SandboxOracle, dict]:
    sandbox = start_sandbox(procs, db=procs.log_dir / "sandbox.sqlite3", ignore_keys=sandbox_keys == "ignore")
    client = SandboxClient(sandbox.url)
    client.set_faults(honor_keys=sandbox_keys == "honor", **(helpdesk_faults or {}))
    helpdesk = {"HELPDESK_KIND": "rest", "HELPDESK_URL": sandbox.url, "EMAIL_HOST": "127.0.0.1",
                "EMAIL_PORT": str(sandbox.smtp_port)}
    stack.enter_context(override_settings(HELPDESK_KIND="rest", HELPDESK_URL=sandbox.url,
                                          EMAIL_PORT=sandbox.smtp_port,
                                          HELPDESK_UPSTREAM_TIMEOUT=float(FAST_ENV["HELPDESK_UPSTREAM_TIMEOUT"])))
    return SandboxOracle(client), helpdesk


def _start_rt(stack: ExitStack) -> tuple[RTOracle, dict]:
    """A private Request Tracker for the run (ops/rt_server.py), stopped when the run ends."""
    server = start_rt_server()
    stack.callback(stop_rt_server, server)
    helpdesk = {"HELPDESK_KIND": "rt", "HELPDESK_URL": server.base_url, "HELPDESK_USER": server.user,
                "HELPDESK_PASSWORD": server.password, "RT_ESCALATION_QUEUE": OTHER_QUEUE, **RT_ENV}
    stack.enter_context(override_settings(
        HELPDESK_KIND="rt", HELPDESK_URL=server.base_url, HELPDESK_USER=server.user,
        HELPDESK_PASSWORD=server.password, RT_ESCALATION_QUEUE=OTHER_QUEUE,
        HELPDESK_CONNECT_TIMEOUT=float(RT_ENV["HELPDESK_CONNECT_TIMEOUT"]),
        HELPDESK_READ_TIMEOUT=float(RT_ENV["HELPDESK_READ_TIMEOUT"]),
        HELPDESK_UPSTREAM_TIMEOUT=float(FAST_ENV["HELPDESK_UPSTREAM_TIMEOUT"])))
    return RTOracle(server), helpdesk


def _start_gateway(stack: ExitStack, helpdesk: dict, seed: int, read_share: float = 0.0) -> Gateway:
    """The workers' and the sweep's helpdesk behind ops/gateway.py (the harness itself asks it directly);
    `read_share` of its reads fail in turn as a 503, a closed connection and a stall, the whole run long."""
    gateway = Gateway(helpdesk["HELPDESK_URL"], write_share=0.0, seed=seed, read_share=read_share)
    helpdesk["HELPDESK_URL"] = gateway.start()
    stack.callback(gateway.close, wait=False)
    return gateway


def nobody_needed(report: Report) -> None:
    """With only hiccups and clicks to meet, no item fails and no task is suspended."""
    if report.failed_items:
        report.problems.append(f"{report.failed_items} item(s) failed on the way: a hiccup or a click needs nobody")
    if report.suspensions:
        report.problems.append(f"{report.suspensions} task suspension(s) on the way")


def _faults_checked(channel: str, faults: set[str], fault_seconds: float) -> set[str]:
    """The run's faults, or ValueError naming what cannot be run."""
    if channel not in CHANNELS:
        raise ValueError(f"channel {channel!r} is not one of {', '.join(CHANNELS)}")
    if faults - set(FAULTS):
        raise ValueError(f"faults {', '.join(sorted(faults - set(FAULTS)))}: not among {', '.join(FAULTS)}")
    lease = float(RT_ENV["LEASE_SECONDS"] if channel == "rt" else FAST_ENV["LEASE_SECONDS"])
    if faults & set(SLOW_FAULTS) and fault_seconds <= lease:
        raise ValueError(f"fault_seconds {fault_seconds} must outlast the lease ({lease:g} s)")
    return faults


def run_killtest(*, rounds: int, items: int, workers: int, seed: int, sandbox_keys: str = "honor",
                 channel: str = "helpdesk", faults: set[str] | None = None, crash_probability: float = 0.1,
                 round_timeout: float = 120.0, kill_every: tuple[float, float] = (0.5, 2.0),
                 worker_command: list[str] | None = None, helpdesk_faults: dict | None = None,
                 fault_seconds: float = 12.0, gateway_share: float = 0.15, playbook: Path | None = None,
                 rehearsals: bool = False, threads: int = 1, operator: bool = False, read_faults: float = 0.0,
                 sweep_in_workers: bool = False, out=sys.stdout) -> Report:
    """Run the kill test. `channel`: helpdesk (the sandbox's REST API), email
    (SMTP, no look-up) or rt (a private Request Tracker: the helpdesk and the
    oracle). `worker_command` starts one worker (default: `manage.py worker`);
    the self-test passes one with a broken gate. `helpdesk_faults`: the
    sandbox's own faults for the whole run (latency_ms, error_rate, drop_rate,
    as `POST /_sandbox/faults` takes them). `faults`: any of FAULTS; the
    slow-worker ones (ops/killtest/slow.py) take one round each in turn and
    last `fault_seconds` (more than the lease, LEASE_SECONDS here);
    `gateway_share`: the share of writes the gateway answers 504. `playbook`: a playbook file the tasks run
    on (what it holds for approval the harness approves or rejects); `rehearsals`: each round also rehearses
    its tickets, and nothing may be sent for them. `operator`: a person on the Review page clicks Reconcile now
    and records verdicts at random moments (ops/killtest/operator.py); `read_faults`: that share of the
    helpdesk's reads fails (a 503, a closed connection, a stall) behind the gateway, the whole run. Either way
    no item may fail and no task be suspended: a hiccup or a click needs nobody. `sweep_in_workers`: no sweep
    process, the workers take turns at it (as deployed), and half the kills are aimed at its holder."""
    import redis

    faults = _faults_checked(channel, set(faults or ()), fault_seconds)
    rng = random.Random(seed)
    version = playbook_import(data=spec_from_file(playbook), publish=True) if playbook else None
    report = Report(helpdesk_faults=", ".join(f"{k} {v}" for k, v in sorted((helpdesk_faults or {}).items())),
                    playbook=version.label if version else "")
    started = time.monotonic()
    procs = Processes(log_dir=Path(tempfile.mkdtemp(prefix="killtest-")))
    pool = WorkerPool(procs, workers=workers, rng=rng, crash_probability=crash_probability,
                      worker_command=worker_command or [sys.executable, "manage.py", "worker",
                                                        *(() if sweep_in_workers else ("--no-sweep",))],
                      proxied=bool(faults & set(WORKER_FAULTS)), threads=threads, sweep_in_workers=sweep_in_workers)
    round_faults = tuple(f for f in SLOW_FAULTS if f in faults)
    with ExitStack() as stack:  # on the way out: the workers first, then the helpdesk
        if channel == "rt":
            oracle, helpdesk = _start_rt(stack)
        stack.callback(procs.stop)
        stack.callback(pool.close)
        if channel != "rt":
            oracle, helpdesk = _start_sandbox(procs, stack, sandbox_keys, helpdesk_faults)
        gateway = _start_gateway(stack, helpdesk, seed, read_faults) if "gateway" in faults or read_faults \
            else None
        procs.env = child_env(helpdesk)
        slow = SlowFaults(pool, report, seconds=fault_seconds, gateway=gateway,
                          gateway_share=gateway_share) if round_faults else None
        if slow is not None:
            stack.callback(slow.finish)
        pool.start()
        harness = Harness(pool, oracle, rng, report, faults, redis.Redis.from_url(settings.REDIS_URL),
                          round_timeout, kill_every, slow, round_faults, version, rehearsals,
                          Operator(random.Random(seed + 1), oracle.holds) if operator else None)
        _run_rounds(harness, rounds=rounds, items=items, seed=seed, channel=channel, out=out)
        _finish_report(report, harness, gateway, strict=operator or bool(read_faults))
    report.seconds = time.monotonic() - started
    return report


def _finish_report(report: Report, h: Harness, gateway: Gateway | None, *, strict: bool) -> None:
    """What the run's helpers counted, into the report; with only hiccups and clicks to meet (`strict`), no item
    may have failed and no task been suspended."""
    if gateway is not None:
        report.faults.update({f"gateway {k}": v for k, v in gateway.counts.items() if k != "passed"})
    if h.operator is not None:
        report.operator = h.operator.clicks
    if strict:
        nobody_needed(report)
    report.kills = h.pool.crash_counts()
    report.kills["wall-clock"] = h.pool.wall_kills
    report.sweep_takeovers = list(h.pool.takeovers)
    report.sweep_takeovers_ready = list(h.pool.takeovers_ready)
    report.sweep_in_workers = h.pool.sweep_in_workers
    report.worker_starts = h.pool.modes
