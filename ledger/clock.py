"""The one clock leases and settle times are compared on: PostgreSQL's.

Hosts' clocks may be off by seconds (or by the minutes of a VM resumed from
a snapshot); every deadline that one process writes and another compares is
written and compared with the database's time instead. A process's own
waits (is my lease still valid?) use its monotonic clock, never the wall.
"""

import datetime as dt

from django.db import connection


def db_now() -> dt.datetime:
    """The database's current time (`clock_timestamp()`: not the transaction's start)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


# Past every bound an unknown's settle time counts (a call's timeouts, a
# gateway's upstream timeout, the old holder's lease): scheduling and clock
# rates between the processes that compare them.
SETTLE_MARGIN_SECONDS = 2.0
