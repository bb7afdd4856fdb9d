"""`manage.py worker`: one recovery pass, then an RQ worker for the item queue."""

import uuid

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import connections

import ticketagent.pipeline.run  # noqa: F401 - the job's code, loaded once before any fork
from ticketagent.db_sessions import session_limits
from ticketagent.recovery import recover_once

# rq's worker key expires WORKER_TTL (+60) seconds after the last heartbeat; an idle
# worker heartbeats every WORKER_TTL - 15 s (rq's default TTL, 420 s, would let a
# hung worker look alive for eight minutes). `manage.py worker-health` reads it.
WORKER_TTL = 60


class Command(BaseCommand):
    help = "Start an RQ worker for the ticket queue, after one recovery pass."

    def add_arguments(self, parser):
        parser.add_argument("--burst", action="store_true", help="exit when the queue is empty")
        parser.add_argument("--name", default=None,
                            help="worker name (default: <inproc|fork>-<random>); a fixed name is taken over from a "
                                 "worker silent for LEASE_SECONDS, and waited for while its holder is alive")
        parser.add_argument("--with-scheduler", action="store_true")
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--fork", dest="fork", action="store_true", default=None,
                          help="fork a work-horse per job (default: the WORKER_FORK setting)")
        mode.add_argument("--no-fork", dest="fork", action="store_false",
                          help="run jobs in this process (the default unless WORKER_FORK is set)")

    def handle(self, *args, burst=False, name=None, with_scheduler=False, fork=None, **options):
        session_limits("worker")
        try:
            stats = recover_once()
            self.stdout.write(f"recovery at start: {stats}")
        except Exception as exc:  # noqa: BLE001 - the worker still starts; the sweep loop retries
            self.stderr.write(f"recovery at start failed: {exc}")
        fork = settings.WORKER_FORK if fork is None else fork
        # rq's worker classes with a command channel that is checked and rebuilt (ticketagent/rqworker.py)
        kwargs = {"burst": burst, "with_scheduler": with_scheduler, "worker_ttl": WORKER_TTL,
                  "worker_class": "ticketagent.rqworker.Worker"}
        if not fork:
            # One process runs every job: its database connection is kept
            # between jobs (each job health-checks it first, ticketagent.jobs)
            # instead of a connection and a fork per job.
            kwargs["worker_class"] = "ticketagent.rqworker.SimpleWorker"
            for conn in connections.all():
                if not conn.settings_dict.get("CONN_MAX_AGE"):
                    conn.settings_dict["CONN_MAX_AGE"] = None
        # The kind is part of the name, so the workers page can tell it from rq's registry.
        kwargs["name"] = name or f"{'fork' if fork else 'inproc'}-{uuid.uuid4().hex[:12]}"
        call_command("rqworker", settings.RQ_QUEUE, **kwargs)
