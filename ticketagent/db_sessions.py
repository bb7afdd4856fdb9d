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

The client side (TCP keepalives and tcp_user_timeout, in
`settings.DATABASES`) lets a worker notice a dead link instead of waiting
on a socket for the kernel's two hours.
"""

from django.conf import settings
from django.db.backends.signals import connection_created

_ROLE: list[str] = []


def session_settings(role: str) -> dict[str, str]:
    """The `SET` values of a session of `role` ("worker" or "sweep")."""
    values = {
        "statement_timeout": f"{int(settings.DB_STATEMENT_TIMEOUT_SECONDS * 1000)}ms",
        "idle_in_transaction_session_timeout": f"{int(settings.DB_IDLE_IN_TRANSACTION_SECONDS * 1000)}ms",
    }
    if role == "sweep":
        values["lock_timeout"] = f"{int(settings.DB_SWEEP_LOCK_TIMEOUT_SECONDS * 1000)}ms"
    return values


def _apply(sender, connection, **kwargs):
    if not _ROLE:
        return
    values = session_settings(_ROLE[0])
    with connection.cursor() as cursor:  # one round trip: set_config(name, value, false) is SET
        cursor.execute("SELECT " + ", ".join(["set_config(%s, %s, false)"] * len(values)),
                       [part for pair in values.items() for part in pair])


def session_limits(role: str) -> None:
    """From now on every new database session of this process gets the
    limits of `role`; an open one is closed so that the next is new."""
    from django.db import connections

    _ROLE[:] = [role]
    connection_created.connect(_apply, dispatch_uid="ticketagent.db_sessions")
    for conn in connections.all():
        conn.close()
