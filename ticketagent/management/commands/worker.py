"""`manage.py worker`: one recovery pass, then an RQ worker for the item queue that takes its turn at the
recovery sweep (`ticketagent.scheduling.sweep`; not in a burst, nor with --no-sweep)."""

import time
import uuid

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import connections

import ticketagent.pipeline.run  # noqa: F401 - the job's code, loaded once before any fork
from ticketagent.channels.identity import Helpdesk, IdentityUnknown
from ticketagent.channels.served import helpdesk_served
from ticketagent.pipeline.binding import tasks_not_served
from ticketagent.scheduling import jobs, rqworker
from ticketagent.scheduling.db_sessions import session_limits
from ticketagent.scheduling.recovery import recover_once

# rq's worker key expires WORKER_TTL (+60) seconds after the last heartbeat; an idle
# worker heartbeats every WORKER_TTL - 15 s (rq's default TTL, 420 s, would let a
# hung worker look alive for eight minutes). `manage.py worker-health` reads it.
WORKER_TTL = 60
IDENTITY_RETRY_MAX_SECONDS = 10.0  # a helpdesk that comes back is noticed within this


class Command(BaseCommand):
    help = "Start an RQ worker for the ticket queue, after one recovery pass."

    def add_arguments(self, parser):
        parser.add_argument("--burst", action="store_true", help="exit when the queue is empty")
        parser.add_argument("--name", default=None,
                            help="worker name (default: <inproc|fork>-<random>); a fixed name is taken over from a "
                                 "worker silent for LEASE_SECONDS, and waited for while its holder is alive")
        parser.add_argument("--with-scheduler", action="store_true")
        parser.add_argument("--no-sweep", dest="sweep", action="store_false",
                            help="take no turn at the recovery sweep (another worker or `recover --loop` does)")
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--fork", dest="fork", action="store_true", default=None,
                          help="fork a work-horse per job (default: the WORKER_FORK setting)")
        mode.add_argument("--no-fork", dest="fork", action="store_false",
                          help="run jobs in this process (the default unless WORKER_FORK is set)")

    def handle(self, *args, burst=False, name=None, with_scheduler=False, fork=None, sweep=True, **options):
        session_limits("worker")
        rqworker.SWEEPS[0] = sweep and not burst
        served = self._helpdesk()
        try:
            stats = recover_once()
            self.stdout.write(f"recovery at start: {stats}")
        except Exception as exc:  # noqa: BLE001 - the worker still starts; the sweep loop retries
            self.stderr.write(f"recovery at start failed: {exc}")
        fork = settings.WORKER_FORK if fork is None else fork
        # rq's worker classes with a command channel that is checked and rebuilt (ticketagent/scheduling/rqworker.py)
        kwargs = {"burst": burst, "with_scheduler": with_scheduler, "worker_ttl": WORKER_TTL,
                  "worker_class": "ticketagent.scheduling.rqworker.Worker"}
        if not fork:
            # One process runs every job: its database connection is kept
            # between jobs (each job health-checks it first, ticketagent.scheduling.jobs)
            # instead of a connection and a fork per job.
            kwargs["worker_class"] = "ticketagent.scheduling.rqworker.SimpleWorker"
            for conn in connections.all():
                if not conn.settings_dict.get("CONN_MAX_AGE"):
                    conn.settings_dict["CONN_MAX_AGE"] = None
        # The kind is part of the name, so the workers page can tell it from rq's registry.
        kwargs["name"] = name or f"{'fork' if fork else 'inproc'}-{uuid.uuid4().hex[:12]}"
        # its helpdesk's queue, then the shared one (the items of tasks not bound to a helpdesk yet)
        call_command("rqworker", jobs.queue_registered(jobs.queue_name(served.id)), settings.RQ_QUEUE, **kwargs)

    def _helpdesk(self) -> Helpdesk:
        """Which helpdesk this worker serves, as that helpdesk reports it: asked until it answers (a worker that
        cannot tell takes no item: it could act on another helpdesk than its tasks'). Says so, and which
        active tasks it will take no items of."""
        pause = 1.0
        while True:
            try:
                served = helpdesk_served()
                break
            except IdentityUnknown as exc:
                self.stderr.write(f"the helpdesk at {settings.HELPDESK_URL} did not say which one it is ({exc}); "
                                  f"no item is taken until it does: asking again in {pause:g} s")
                time.sleep(pause)
                pause = min(2 * pause, IDENTITY_RETRY_MAX_SECONDS)
        self.stdout.write(f"this worker serves {served.label}")
        for line in tasks_not_served(served):
            self.stdout.write(line)
        return served
