"""A worker's fixed name, taken over from a predecessor dead by the lease rule and never from one alive.

rq refuses a worker whose name is registered and not marked dead ("There
exists an active worker named ... already"). A killed worker never marks
itself, and its key outlives it: WORKER_TTL + 60 s when idle, its job's
timeout + 60 s when it died busy (RQ_JOB_TIMEOUT, 15 minutes by default). A
worker restarted under its fixed name (systemd: `--name %H-worker-%i`,
Restart=always) would fail that long. Before rq registers the newcomer, the
registration holding the name is read, on Redis's clock:

    none, or marked dead        the name is free: rq registers the newcomer
    silent for more than        its holder is dead by the rule that takes its items
    LEASE_SECONDS               over (`rqworker.is_alive`): rq's own `register_death()`
                                is run for it (out of the worker sets, its execution
                                set deleted, marked dead), then the newcomer registers
    otherwise                   a live worker holds the name: the newcomer waits and
                                says whose registration it is and when it would count
                                as dead, and looks again

Nothing in the database is touched: the dead worker's items are taken over by
the sweep when their leases expire, as after any kill. Its jobs in rq's
started registry expire as rq's own cleanup decides. A worker that holds no
sign of life (rq's plain worker) is waited for until rq's rule frees its name.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import redis
from django.conf import settings
from rq.worker import Worker as RQWorker

log = logging.getLogger("rq.worker")

WAIT_SAY_AGAIN_SECONDS = 60.0  # a long wait (a live worker with the same name) is said again this often

# The registration holding a name, read at one moment of Redis's clock: {} when the name is free.
_HOLDER = """
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'death') == 1 then return {} end
local f = redis.call('HMGET', KEYS[1], 'seen', 'birth', 'pid', 'hostname')
return {redis.call('TIME')[1], f[1] or '', f[2] or '', f[3] or '', f[4] or '', tostring(redis.call('TTL', KEYS[1]))}
"""


@dataclass(frozen=True)
class Holder:
    """Who holds a worker name, as of `now` (Redis's clock, seconds)."""

    now: float
    seen: float | None  # its last sign of life (None: a worker that gives none)
    birth: str
    pid: str
    hostname: str
    ttl: int

    def dead_at(self, lease: float) -> float | None:
        """When it counts as dead by the lease rule (None: only when rq's key expires)."""
        return None if self.seen is None else self.seen + lease

    def describe(self, lease: float) -> str:
        whose = f"pid {self.pid or '?'} on {self.hostname or '?'}, registered since {self.birth or '?'}"
        dead_at = self.dead_at(lease)
        if dead_at is None:
            return (f"{whose}, a worker without a sign of life: its name is free when rq's key expires, in "
                    f"{self.ttl} s")
        return (f"{whose}, last seen {self.now - self.seen:.0f} s ago; it counts as dead once silent for "
                f"{lease:g} s (LEASE_SECONDS), at {_utc(dead_at)}")


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def name_holder(connection: redis.Redis, key: str) -> Holder | None:
    """The live-or-dead registration holding a worker's key (None: none, or one that marked itself dead)."""
    answer = [a.decode() if isinstance(a, bytes) else str(a) for a in connection.eval(_HOLDER, 1, key)]
    if not answer:
        return None
    now, seen, birth, pid, hostname, ttl = answer
    return Holder(now=float(now), seen=float(seen) if seen else None, birth=birth, pid=pid, hostname=hostname,
                  ttl=int(ttl))


def take_name(worker: RQWorker, *, lease: float | None = None, poll: float = 0.5) -> None:
    """Return once `worker`'s name is free for rq to register it: at once when it is, after rq's
    `register_death()` for a holder dead by the lease rule, or after waiting for a live one to die."""
    lease = settings.LEASE_SECONDS if lease is None else lease
    said_at = None
    while True:
        holder = name_holder(worker.connection, worker.key)
        if holder is None:
            return
        dead_at = holder.dead_at(lease)
        if dead_at is not None and holder.now > dead_at:
            dead = RQWorker.find_by_key(worker.key, connection=worker.connection)
            if dead is not None:
                dead.register_death()  # rq's own: out of the worker sets, its executions dropped, marked dead
            log.warning("Worker %s: took over the name from a dead worker (%s)", worker.name,
                        holder.describe(lease))
            return
        if said_at is None or time.monotonic() - said_at >= WAIT_SAY_AGAIN_SECONDS:
            log.warning("Worker %s: the name is held by a live worker (%s); waiting", worker.name,
                        holder.describe(lease))
            said_at = time.monotonic()
        time.sleep(poll if dead_at is None else min(max(dead_at - holder.now, 0.05) + 0.05, poll * 4))
