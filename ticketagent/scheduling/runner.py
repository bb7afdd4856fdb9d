"""The RQ job (`ticketagent.scheduling.jobs.JOB_FUNCTION`): one attempt of an item, and what scheduling does around it.

The pipeline runs the item (`pipeline.run.item_process`) and knows nothing of
the queue; this module is where the two meet: the worker's database
connection kept between jobs, and, once an item stops waiting for an
answer, its answered unknowns settled at once. (The task's window is topped
up when an item's lease commits: `ticketagent.scheduling.window` listens to
`signals.item_started`.)
"""

import logging
import threading
import time

from django.db import close_old_connections, connection

from ticketagent.pipeline.run import item_process
from ticketagent.scheduling.django_connection import connection_mark_checked
from ticketagent.scheduling.recovery import item_settle_unknowns

log = logging.getLogger(__name__)


# A connection whose last job ended cleanly this recently is not health-checked again.
FRESH_CONNECTION_SECONDS = 1.0
_last = threading.local()  # per thread: a worker's slots each keep a connection of their own


def process_item(item_id: int, attempt: int) -> str:
    """Run one attempt of an item; what happened, for the job log."""
    # A worker that runs jobs in its own process keeps its database
    # connection between jobs: drop it first if it broke or grew too old
    # (a database restart), and after a job that left it unusable. The
    # health check (a `SELECT 1`, CONN_HEALTH_CHECKS) is for a connection that
    # sat idle: one whose last job ended cleanly moments ago is used as it is.
    close_old_connections()
    clean_end = getattr(_last, "clean_end", 0.0)
    if connection.connection is not None and time.monotonic() - clean_end < FRESH_CONNECTION_SECONDS:
        connection_mark_checked()
    _last.clean_end = 0.0
    try:
        outcome = item_process(item_id=item_id, attempt=attempt)
        _after_item(item_id, outcome)
        return outcome
    finally:
        close_old_connections()
        if connection.connection is not None and not connection.errors_occurred:
            _last.clean_end = time.monotonic()


def _after_item(item_id: int, outcome: str) -> None:
    """Once an item stops waiting for an answer: settle its answered unknowns at once."""
    if not outcome.startswith("waiting at "):
        return
    try:
        item_settle_unknowns(item_id)
    except Exception:  # noqa: BLE001 - the recovery sweep does it too
        log.exception("after item %s", item_id)
