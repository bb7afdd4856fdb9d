"""Django's database connection reached past its public API, in this one place: a health check skipped.

CONN_HEALTH_CHECKS makes a kept connection's first query of a request (here:
of a job) a `SELECT 1` first. A worker's connection whose last job ended
cleanly moments ago needs none, and Django has no public way to say so: its
`health_check_done` flag is set here.
"""

from django.db import connection


def connection_mark_checked() -> None:
    """The default connection counts as health-checked for its next query (it ended a job cleanly just now)."""
    connection.health_check_done = True
