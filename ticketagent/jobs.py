"""The queue: RQ transport for items (job ids, enqueueing); the database stays the truth.

Job ids are deterministic (`item-<pk>-a<attempt>`) and enqueued with
unique=True, so enqueueing the same attempt twice queues one job. A job
that runs twice anyway is harmless: the item's lease admits one worker and
its checkpoint and the ledger skip what was done. The job itself is
`ticketagent.pipeline.run.process_item`, named here by its path: the
transport does not import the worker's code.
"""

import logging

import django_rq
from django.conf import settings
from rq.exceptions import DuplicateJobError

log = logging.getLogger(__name__)


JOB_FUNCTION = "ticketagent.pipeline.run.process_item"


def job_id(item_id: int, attempt: int) -> str:
    return f"item-{item_id}-a{attempt}"


def get_queue():
    return django_rq.get_queue(settings.RQ_QUEUE)


def enqueue_items(refs: list[tuple[int, int]]) -> int:
    """Enqueue (item id, attempt) pairs; returns how many were new.

    Redis is transport, not truth: if it is down, the items stay `queued` in
    the database and the recovery sweep enqueues them when it is back.
    """
    if not refs:
        return 0
    queue = get_queue()
    new = 0
    try:
        for item_id, attempt in refs:
            try:
                queue.enqueue(JOB_FUNCTION, item_id, attempt, job_id=job_id(item_id, attempt), unique=True,
                              result_ttl=3600, failure_ttl=24 * 3600,
                              description=f"item {item_id} attempt {attempt}")
                new += 1
            except DuplicateJobError:
                pass
    except Exception as exc:  # noqa: BLE001 - redis down: the sweep re-enqueues
        log.warning("could not enqueue %d item(s), the recovery sweep will retry: %s", len(refs) - new, exc)
    return new
