"""`python -m ops killtest`: the kill test from the command line (docs/reliability.md)."""

import random
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from ops.killtest.run import FAST_ENV, FAULTS, run_killtest


class Command(BaseCommand):
    help = ("Run batches while SIGKILLing workers around external calls, then check per effect key that the "
            "helpdesk (the sandbox, or with --channel rt a private Request Tracker) received nothing twice and "
            "nothing was lost. Exit 1 on any mismatch.")

    def add_arguments(self, parser):
        parser.add_argument("--rounds", type=int, default=5, help="batches, one task each (default: %(default)s)")
        parser.add_argument("--items", type=int, default=20, help="tickets per batch (default: %(default)s)")
        parser.add_argument("--workers", type=int, default=2,
                            help="worker processes running at once (default: %(default)s)")
        parser.add_argument("--seed", type=int, default=None, help="random seed (printed; default: random)")
        parser.add_argument("--sandbox-keys", choices=["honor", "ignore"], default=None,
                            help="ignore: the sandbox does not dedupe by idempotency key, the hard case; not with "
                                 "--channel rt, since RT never honours keys (default: honor)")
        parser.add_argument("--channel", choices=["helpdesk", "email", "rt"], default="helpdesk",
                            help="the channel that notifies customers: the sandbox helpdesk; email, which has no "
                                 "look-up, so the harness plays the operator; or rt, a private Request Tracker "
                                 "(ops/rt_server.py) that is the helpdesk and whose own ticket histories are "
                                 "counted (default: %(default)s)")
        parser.add_argument("--faults", default="", help="comma list: redis (FLUSHDB of the queue database), "
                            "postgres (pg_terminate_backend), and the slow-worker faults, one round each in turn "
                            "(docs/reliability.md): pause (SIGSTOP a worker, SIGCONT later), pause-aimed (SIGSTOP "
                            "it as it sends the statement that commits an intent), stall (hold its database's "
                            "answers), stall-aimed (from that statement on), drop (cut its database link "
                            "silently, then heal), gateway (the helpdesk behind a gateway that answers 504 to a "
                            "share of writes and delivers them 4 s later) (default: none)")
        parser.add_argument("--fault-seconds", type=float, default=12.0,
                            help="how long a pause, stall or drop lasts; more than the lease "
                                 f"(LEASE_SECONDS={FAST_ENV['LEASE_SECONDS']} s here) (default: %(default)s)")
        parser.add_argument("--gateway-share", type=float, default=0.15,
                            help="share of writes the gateway answers 504 in its rounds (default: %(default)s)")
        parser.add_argument("--latency-ms", type=int, default=0,
                            help="the sandbox waits this long before each write (past HELPDESK_READ_TIMEOUT, 2 s "
                                 "here, a write times out and lands late) (default: %(default)s)")
        parser.add_argument("--error-rate", type=float, default=0.0,
                            help="share of sandbox writes refused with a 503, nothing recorded (default: %(default)s)")
        parser.add_argument("--drop-rate", type=float, default=0.0,
                            help="share of sandbox writes recorded, then the connection reset before any answer "
                                 "(default: %(default)s)")
        parser.add_argument("--crash-probability", type=float, default=0.1,
                            help="chance that a worker SIGKILLs itself at its injected window "
                                 "(default: %(default)s)")
        parser.add_argument("--playbook", default="",
                            help="a playbook file (YAML), imported and published, that the rounds' tasks run on: "
                                 "its rules and reply checks hold actions for approval, which the harness "
                                 "approves or rejects at random (default: the shipped playbook)")
        parser.add_argument("--rehearsals", action="store_true",
                            help="each round also rehearses its tickets, under the same kills; nothing may be "
                                 "sent for them (default: off)")
        parser.add_argument("--threads", type=int, default=1,
                            help="WORKER_THREADS of the in-process workers: each holds that many items at once, "
                                 "and a kill ends them all (default: %(default)s)")
        parser.add_argument("--operator", action="store_true",
                            help="a person on the Review page clicks Reconcile now and records verdicts at random "
                                 "moments, through the pages (ops/killtest/operator.py); then no item may fail "
                                 "and no task be suspended (default: off)")
        parser.add_argument("--read-faults", type=float, default=0.0,
                            help="share of the helpdesk's reads that fail behind a gateway, the whole run: a 503, "
                                 "a connection closed unanswered, a stall, in turn; then no item may fail and no "
                                 "task be suspended (default: %(default)s)")
        parser.add_argument("--sweep-in-workers", action="store_true", help="no sweep process: the workers take "
                            "turns at it, as deployed, and half the kills aim at its holder (default: off)")
        parser.add_argument("--round-timeout", type=float, default=120.0,
                            help="seconds a round may take before it is checked as it stands "
                                 "(default: %(default)s)")

    def handle(self, *args, **opts):
        faults = _faults_checked(opts)
        helpdesk_faults = _helpdesk_faults(opts)
        keys = ("RT: keys never honoured" if opts["channel"] == "rt"
                else f"sandbox keys {opts['sandbox_keys'] or 'honor'}")
        playbook = Path(opts["playbook"]) if opts["playbook"] else None
        if playbook is not None and not playbook.is_file():
            raise CommandError(f"--playbook {opts['playbook']}: no such file")
        _migrated_or_refuse()
        seed = opts["seed"] if opts["seed"] is not None else random.randrange(1_000_000)
        self.stdout.write(f"kill test: seed {seed}, {opts['rounds']} rounds x {opts['items']} items x "
                          f"{opts['workers']} workers x {opts['threads']} threads, {keys}, channel {opts['channel']}, "
                          f"faults {','.join(sorted(faults)) or 'none'}"
                          + (f", {opts['read_faults']:.0%} of reads failing" if opts["read_faults"] else "")
                          + (", an operator clicking" if opts["operator"] else ""))
        report = run_killtest(rounds=opts["rounds"], items=opts["items"], workers=opts["workers"], seed=seed,
                              sandbox_keys=opts["sandbox_keys"] or "honor", channel=opts["channel"], faults=faults,
                              crash_probability=opts["crash_probability"], round_timeout=opts["round_timeout"],
                              helpdesk_faults=helpdesk_faults, fault_seconds=opts["fault_seconds"],
                              gateway_share=opts["gateway_share"], playbook=playbook,
                              rehearsals=opts["rehearsals"], threads=opts["threads"], operator=opts["operator"],
                              read_faults=opts["read_faults"], sweep_in_workers=opts["sweep_in_workers"],
                              out=self.stdout)
        self.stdout.write(report.table())
        for problem in report.problems[:50]:
            self.stdout.write(f"  problem: {problem}")
        if not report.ok:
            sys.exit(1)


def _faults_checked(opts) -> set[str]:
    """The faults asked for, once the numbers are checked (CommandError: one out of its range)."""
    for name in ("rounds", "items", "workers", "threads"):
        if opts[name] < 1:
            raise CommandError(f"--{name} must be at least 1")
    faults = {f.strip() for f in opts["faults"].split(",") if f.strip()}
    unknown = faults - set(FAULTS)
    if unknown:
        raise CommandError(f"--faults: unknown fault(s) {', '.join(sorted(unknown))}; use {', '.join(FAULTS)}")
    if opts["fault_seconds"] <= float(FAST_ENV["LEASE_SECONDS"]):
        raise CommandError(f"--fault-seconds {opts['fault_seconds']} must outlast the lease "
                           f"(LEASE_SECONDS={FAST_ENV['LEASE_SECONDS']} s)")
    for share in ("gateway_share", "read_faults"):
        if not 0.0 <= opts[share] <= 1.0:
            raise CommandError(f"--{share.replace('_', '-')} {opts[share]} must be between 0 and 1")
    return faults


def _helpdesk_faults(opts) -> dict:
    """The sandbox's faults asked for (CommandError: with --channel rt, which has no sandbox)."""
    helpdesk_faults = {k: v for k, v in (("latency_ms", opts["latency_ms"]),
                                         ("error_rate", {"*": opts["error_rate"]} if opts["error_rate"] else 0),
                                         ("drop_rate", {"*": opts["drop_rate"]} if opts["drop_rate"] else 0)) if v}
    if opts["channel"] == "rt" and helpdesk_faults:
        raise CommandError("--latency-ms, --error-rate, --drop-rate are the sandbox's: not with --channel rt")
    if opts["channel"] == "rt" and opts["sandbox_keys"]:
        raise CommandError("--sandbox-keys: with --channel rt there is no sandbox, and RT never honours keys")
    return helpdesk_faults


def _migrated_or_refuse() -> None:
    executor = MigrationExecutor(connection)
    unapplied = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if unapplied:
        raise CommandError(f"the database ({connection.settings_dict['NAME']}) lacks {len(unapplied)} "
                           f"migrations: run `python manage.py migrate` on it first (DATABASE_URL)")
