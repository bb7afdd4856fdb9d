"""Per-session limits for the worker's and the sweep's database sessions.

A host that is cut off (or a process that is paused) between a statement
and its COMMIT leaves its transaction open on the server, holding row
locks every other worker and the sweep would wait on. Set per session
(no server change, so a managed PostgreSQL needs none):

    statement_timeout                     no statement runs longer
    idle_in_transaction_session_timeout   an open transaction whose client
                                          went silent is ended, its locks
                                          released
    lock_timeout (the sweep only)         the sweep never waits long on a
                                          lock; it skips locked rows anyway
    plan_cache_mode                       on a server with autovacuum off,
                                          `force_custom_plan`: a statement
                                          the session keeps prepared is
                                          parsed once and planned with its
                                          parameters at every run; with
                                          autovacuum on, the server's own
                                          `auto` (DB_PLAN_CACHE_MODE chooses)

Why the last: after a few runs of a prepared statement (and of the foreign
key checks PostgreSQL runs for every insert) the server may switch to one
generic plan and keep it until an ANALYZE of its tables invalidates it.
Made while a new database's tables hold a handful of rows, that plan is a
sequential scan. Autovacuum analyzes a growing table every 50 rows + 10%,
so the plan is made again as the table grows; without autovacuum nothing
does, and a worker that lives for days keeps scanning whole tables.
Measured (docs/benchmarks.md, "Plans kept from near-empty tables"): one worker
on a new database, autovacuum off, went from 5 to 19 ms of server time an
item within 1,500 items; planned at every run it stayed at 3-4 -- but
planning every run costs about twice the server time an item of a kept
plan, which is why it is not the choice where autovacuum keeps plans fresh.

The client side (TCP keepalives and tcp_user_timeout, in
`settings.DATABASES`) lets a worker notice a dead link instead of waiting
on a socket for the kernel's two hours. The server side is set here, with
the same values (the connection's own libpq options, ticketagent/settings.py):
a host that vanishes while its session sits idle
leaves a backend waiting for a statement that never comes, which the
server's kernel, whose own keepalive starts after two hours, would keep
for that long, holding a connection slot and the session's memory.

    tcp_keepalives_idle, _interval, _count   the server probes an idle
                                             session's client as the
                                             client probes the server
    tcp_user_timeout                         and gives up on data it sent
                                             that stays unacknowledged

so a lost host's sessions end within `lost_client_seconds()` (Linux: with
tcp_user_timeout set, the connection is dropped at the first probe that
finds it exceeded, instead of after a count of probes). All four are
ignored over a unix socket.
"""

import contextlib
import math
import os
import socket
import threading

from django.conf import settings
from django.db.backends.signals import connection_created

_ROLE: list[str] = []
_THREAD = threading.local()  # a thread's own role (the sweep's thread in a worker), over the process's

# DB_PLAN_CACHE_MODE, or unset (''): plans kept where autovacuum keeps them fresh, made at every run where nothing does
_PLAN_CACHE_MODE = ("COALESCE(NULLIF(%s, ''), "
                    "CASE current_setting('autovacuum') WHEN 'on' THEN 'auto' ELSE 'force_custom_plan' END)")


def session_settings(role: str, options: dict | None = None) -> dict[str, str]:
    """The `SET` values of a session of `role` ("worker" or "sweep") whose connection has the libpq `options`
    (default: the database settings')."""
    values = {
        "statement_timeout": f"{int(settings.DB_STATEMENT_TIMEOUT_SECONDS * 1000)}ms",
        "idle_in_transaction_session_timeout": f"{int(settings.DB_IDLE_IN_TRANSACTION_SECONDS * 1000)}ms",
        **server_keepalives(options),
    }
    if role == "sweep":
        values["lock_timeout"] = f"{int(settings.DB_SWEEP_LOCK_TIMEOUT_SECONDS * 1000)}ms"
    return values


def server_keepalives(options: dict | None = None) -> dict[str, str]:
    """The server's watch on the session's client: the client's own keepalive options, mirrored."""
    options = settings.DATABASES["default"]["OPTIONS"] if options is None else options
    return {"tcp_keepalives_idle": f"{int(options['keepalives_idle'])}s",
            "tcp_keepalives_interval": f"{int(options['keepalives_interval'])}s",
            "tcp_keepalives_count": str(int(options["keepalives_count"])),
            "tcp_user_timeout": f"{int(options['tcp_user_timeout'])}ms"}


def lost_client_seconds(options: dict | None = None) -> float:
    """How long an idle session of a host that vanished lasts on the server (Linux's keepalive timer): the
    first probe after `idle` s, one every `interval` s; dropped after `count` unanswered probes, or, with
    tcp_user_timeout set, at the first probe that finds the link silent for longer than it."""
    options = settings.DATABASES["default"]["OPTIONS"] if options is None else options
    idle, interval = int(options["keepalives_idle"]), int(options["keepalives_interval"])
    user_timeout = int(options["tcp_user_timeout"]) / 1000
    if user_timeout <= 0:
        return idle + interval * int(options["keepalives_count"])
    return idle + interval * max(1, math.ceil((user_timeout - idle) / interval))


def _apply(sender, connection, **kwargs):
    role = getattr(_THREAD, "role", None) or (_ROLE[0] if _ROLE else None)
    if role is None:
        return
    values = session_settings(role, connection.settings_dict["OPTIONS"])
    if role == "sweep":  # the Workers page finds the sweep's holder by it (`sweep.sweep_holder`)
        values["application_name"] = f"sweep {socket.gethostname()}:{os.getpid()}"
    with connection.cursor() as cursor:  # one round trip: set_config(name, value, false) is SET
        cursor.execute("SELECT " + ", ".join(["set_config(%s, %s, false)"] * len(values))
                       + f", set_config('plan_cache_mode', {_PLAN_CACHE_MODE}, false)",
                       [*(part for pair in values.items() for part in pair), settings.DB_PLAN_CACHE_MODE])


@contextlib.contextmanager
def sweep_session():
    """In this thread, database sessions of the sweep's role (its limits, and its name) while it lasts."""
    from django.db import connection

    connection_created.connect(_apply, dispatch_uid="ticketagent.scheduling.db_sessions")
    connection.close()
    _THREAD.role = "sweep"
    try:
        yield
    finally:
        _THREAD.role = None


def session_limits(role: str) -> None:
    """From now on every new database session of this process gets the
    limits of `role`; an open one is closed so that the next is new."""
    from django.db import connections

    _ROLE[:] = [role]
    connection_created.connect(_apply, dispatch_uid="ticketagent.scheduling.db_sessions")
    for conn in connections.all():
        conn.close()
