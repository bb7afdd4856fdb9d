"""One recovery sweep for the whole deployment, run by whichever process holds it.

Every worker (`manage.py worker`, but for a burst) runs `sweep_while_held` in a thread of its own, and so
does `manage.py recover --loop`: each keeps a session of its own for a PostgreSQL advisory lock
(`SWEEP_LOCK`, session level), which a thread of its own tries to take every RECOVER_INTERVAL_SECONDS (and
touches at least every tenth of a lease while it holds it); the process that holds it runs a pass
(`recovery.recover_once`) every interval on another session, and counts the dashboard's numbers every
HEALTH_CACHE_SECONDS; the Workers page marks it (`sweep_holder`). The lock lives exactly as long as its session:

- the holder stops: the session is closed and the lock released at once;
- it is killed: the kernel closes its socket and the server ends the session at once;
- it is paused, or its host cut off: the session goes silent, and the server ends it after
  `idle_session_timeout` (one lease, set on the session when it takes the lock; PostgreSQL 14 and later),
  or when its keepalives give up (`db_sessions.lost_client_seconds`);

and another process takes it at its next try: a lease and an interval after the holder went silent. A pass
that waits on a slow helpdesk does not make the lock's session silent (it is not the passes' session). A
holder that wakes from a pause finds the lock's session ended; its next statement fails and it tries to take
the lock again like any other. Passes may overlap anyway (each part locks the rows it changes and skips
those another session holds: the woken holder's pass in flight ends beside the new holder's), so the lock
keeps the deployment to one sweep; it guards no invariant.
"""

import logging
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.db import connection

from ticketagent.health import health_numbers_refresh
from ticketagent.scheduling.db_sessions import sweep_session
from ticketagent.scheduling.recovery import recover_once

log = logging.getLogger(__name__)

# pg_try_advisory_lock(int, int): one per database; pg_locks shows it as classid, objid, objsubid 2
SWEEP_LOCK = (0x7461, 0x7377)

_HELD = """SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2
            AND pid = pg_backend_pid() AND classid = %s AND objid = %s)"""
_TAKE = "SELECT set_config('idle_session_timeout', %s, false), pg_try_advisory_lock(%s, %s)"
_TAKE_ONLY = "SELECT pg_try_advisory_lock(%s, %s)"
_HOLDER = """SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
             WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = %s AND l.objid = %s
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"""


def sweep_taken() -> bool:
    """On this thread's session: it holds the sweep, or has just taken it."""
    with connection.cursor() as cursor:
        cursor.execute(_HELD, SWEEP_LOCK)
        if cursor.fetchone()[0]:
            return True
        # idle_session_timeout is PostgreSQL 14's: on an older server a paused holder keeps the sweep until it wakes
        silent = f"{int(settings.LEASE_SECONDS * 1000)}ms" if connection.pg_version >= 140000 else ""
        cursor.execute(_TAKE if silent else _TAKE_ONLY, [silent, *SWEEP_LOCK] if silent else SWEEP_LOCK)
        return bool(cursor.fetchone()[-1])


def sweep_holder() -> str | None:
    """The process that holds the sweep, "<host>:<pid>" (its session's application name says so); None: none
    does."""
    with connection.cursor() as cursor:
        cursor.execute(_HOLDER, SWEEP_LOCK)
        row = cursor.fetchone()
    return row[0].removeprefix("sweep ") if row and row[0].startswith("sweep ") else None


def sweep_while_held(stop: threading.Event | Callable[[], bool], *, interval: float | None = None) -> None:
    """Until `stop`: take the sweep when no one holds it, and sweep while this process holds it.

    The lock is kept by a thread of its own (`_keep_lock`) on a session that does nothing else and says
    something every tick, so the server finds it silent only when the whole process is (paused, cut off). The
    passes run here, on this thread's session: a pass may wait on a slow helpdesk for as long as a look-up
    takes (no transaction is open meanwhile) without the lock's session going silent -- were the lock on the
    passes' session, the server would end it in the middle of every look-up slower than a lease, and the
    look-up's answer would be lost with it."""
    interval = interval or settings.RECOVER_INTERVAL_SECONDS
    stopped = stop.is_set if isinstance(stop, threading.Event) else stop
    wait = stop.wait if isinstance(stop, threading.Event) else time.sleep
    held, done = threading.Event(), threading.Event()
    tick = min(interval, settings.LEASE_SECONDS / 10)  # the lock's session is never silent for a lease
    keeper = threading.Thread(target=_keep_lock, args=(held, lambda: done.is_set() or stopped(), done.wait, tick),
                              name="sweep-lock", daemon=True)
    keeper.start()
    next_count = 0.0
    with sweep_session():
        try:
            while not stopped():
                if held.is_set():
                    next_count = _pass(next_count)
                else:
                    connection.close()  # a process that does not sweep keeps no session for it
                wait(interval)
        finally:
            done.set()
            connection.close()
            keeper.join(timeout=settings.DB_STATEMENT_TIMEOUT_SECONDS)  # the lock goes with its session, at once


def _keep_lock(held: threading.Event, stopped: Callable[[], bool], wait: Callable[[float], object],
               tick: float) -> None:
    """Every `tick`, on this thread's own session: hold the sweep's lock, or try to take it; `held` says which."""
    with sweep_session():
        try:
            while not stopped():
                try:
                    now_held = sweep_taken()
                except Exception as exc:  # noqa: BLE001 - the thread must outlive it: a new session next try
                    # (a DatabaseError: the session ended -- a pause, the server restarted)
                    log.info("sweep: its database session is gone (%s)", str(exc).strip())
                    connection.close()
                    now_held = False
                if now_held != held.is_set():
                    log.info("sweep: %s", "this process sweeps now" if now_held else "no longer sweeps")
                    if now_held:
                        held.set()
                    else:
                        held.clear()
                wait(tick)
        finally:
            held.clear()
            connection.close()


def _pass(next_count: float) -> float:
    try:
        stats = recover_once()
        if any(stats.values()):
            log.info("recovery: %s", stats)
        if time.monotonic() >= next_count:
            next_count = time.monotonic() + settings.HEALTH_CACHE_SECONDS
            health_numbers_refresh()
    except Exception:  # noqa: BLE001 - the sweep must outlive a bad pass (e.g. DB restart)
        log.exception("recovery pass failed")
        connection.close()
    return next_count


def recover_loop(*, interval: float | None = None, stop: Callable[[], bool] | None = None) -> None:
    """`manage.py recover --loop`: this process takes its turn at the sweep like a worker."""
    sweep_while_held(stop or (lambda: False), interval=interval)
