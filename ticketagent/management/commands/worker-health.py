"""`manage.py worker-health [--name NAME]`: is this host's worker alive and taking jobs? (exit 0 yes, 1 no).

What an orchestrator runs as a worker's liveness/readiness probe (systemd's
ExecStartPost/a timer, a Kubernetes exec probe, a container HEALTHCHECK). It
reads rq's worker registry in Redis: a worker is registered under a key that
expires unless the worker heartbeats (`manage.py worker` heartbeats at least
every WORKER_TTL - 15 seconds while idle, and a running job keeps the key for
its timeout). A worker passes when its key is there and it is either busy or
its last heartbeat is recent. Nothing is changed.
"""

import socket
from datetime import UTC, datetime

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from rq import Worker
from rq.queue import Queue

from ticketagent.management.commands.worker import WORKER_TTL


def _age_seconds(moment) -> float:
    if moment is None:
        return float("inf")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (datetime.now(UTC) - moment).total_seconds()


class Command(BaseCommand):
    help = "Exit 0 if this host's RQ worker (or the one named) is registered and heartbeating, else 1."

    def add_arguments(self, parser):
        parser.add_argument("--name", default=None,
                            help="the worker's name (manage.py worker --name); default: every worker on this host")
        parser.add_argument("--max-age", type=float, default=2 * WORKER_TTL,
                            help="seconds since an idle worker's last heartbeat (default %(default)s)")

    def handle(self, *args, name=None, max_age=2 * WORKER_TTL, **options):
        try:
            conn = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
            workers = Worker.all(queue=Queue(settings.RQ_QUEUE, connection=conn))
        except redis.RedisError as exc:
            raise CommandError(f"not ready: Redis does not answer ({type(exc).__name__})") from None
        host = socket.gethostname()
        mine = [w for w in workers if (w.name == name if name else w.hostname == host)]
        if not mine:
            which = f"named {name!r}" if name else f"on host {host}"
            raise CommandError(f"not ready: no worker {which} is registered for queue {settings.RQ_QUEUE!r}")
        healthy = 0
        for worker in mine:
            state, age = worker.get_state(), _age_seconds(worker.last_heartbeat)
            ok = state == "busy" or age <= max_age
            healthy += ok
            self.stdout.write(f"{worker.name}: {state}, last heartbeat {age:.0f} s ago, "
                              f"job {worker.get_current_job_id() or '-'} - {'ok' if ok else 'silent too long'}")
        if not healthy:
            raise CommandError(f"not ready: no heartbeat within {max_age:.0f} s")
