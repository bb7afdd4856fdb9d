"""The queue: RQ transport for items (job ids, enqueueing, withdrawing); the database stays the truth.

Job ids are deterministic (`item-<pk>-a<attempt>`). An item's attempt is
sent to Redis once, when the task's window takes it (`ticketagent.scheduling.window`
marks it `enqueued_at` in the same statement that picks it); jobs go out in
two round trips whatever their number (which ids exist already, then the
new ones in one pipeline), so an attempt still queues one job even if it is
sent twice (rq's own `unique=True` is one round trip a job). A job that runs twice
anyway is harmless: the item's lease admits one worker and its checkpoint
and the ledger skip what was done. The job itself is
`ticketagent.scheduling.runner.process_item`, named here by its path: the
transport does not import the worker's code.
"""

import hashlib
import logging

import django_rq
from django.conf import settings
from rq.job import Job

from ticketagent.models import FINAL_TASK_STATUSES, Task

log = logging.getLogger(__name__)


JOB_FUNCTION = "ticketagent.scheduling.runner.process_item"


def job_id(item_id: int, attempt: int) -> str:
    return f"item-{item_id}-a{attempt}"


# One queue per process and configuration. django_rq builds a new Redis client
# -- a new connection pool -- on every call, so a worker opened a connection
# (and its handshake) for every window top-up; a kept pool reuses it. A
# connection a Redis restart closed is replaced when the pool hands it out,
# and a forked process gets a pool of its own (redis-py checks the pid).
_QUEUES: dict[tuple, object] = {}


def queue_name(helpdesk_id: str | None) -> str:
    """The queue of the items of tasks bound to `helpdesk_id`: a worker listens to its own helpdesk's queue (and
    to the shared one, RQ_QUEUE, where the items of tasks not bound yet wait), so a worker serving another
    helpdesk never even takes them (`ticketagent.channels.identity`)."""
    if not helpdesk_id:
        return settings.RQ_QUEUE
    return f"{settings.RQ_QUEUE}.hd-{hashlib.sha256(helpdesk_id.encode()).hexdigest()[:16]}"


def get_queue(name: str | None = None):
    name = name or settings.RQ_QUEUE
    key = (name, repr(settings.RQ_QUEUES.get(name, settings.RQ_QUEUES[settings.RQ_QUEUE])))
    queue = _QUEUES.get(key)
    if queue is None:
        if len(_QUEUES) > 16:  # (tests change the configuration; a process keeps one)
            _QUEUES.clear()
        queue = _QUEUES[key] = django_rq.get_queue(queue_registered(name))
    return queue


def queues_in_use() -> list:
    """The shared queue and the queue of each helpdesk a task not yet final is bound to."""
    bound = (Task.objects.exclude(status__in=FINAL_TASK_STATUSES).filter(helpdesk_id__isnull=False)
             .values_list("helpdesk_id", flat=True).distinct())
    return [get_queue()] + [get_queue(queue_name(h)) for h in sorted(set(bound))]


def queue_registered(name: str) -> str:
    """`name`, made known to django_rq (which builds queues and workers from RQ_QUEUES): a helpdesk's queue is
    the shared queue's configuration (its Redis, its timeout) under another name."""
    settings.RQ_QUEUES.setdefault(name, settings.RQ_QUEUES[settings.RQ_QUEUE])
    return name


def enqueue_items(refs: list[tuple[int, int]], *, queue: str | None = None, strict: bool = False,
                  front: bool = False) -> int:
    """Enqueue the (item id, attempt) pairs that have no job yet on the queue named `queue` (their task's:
    `queue_name`), in one Redis pipeline; returns how many (`front`: ahead of the jobs already waiting, in the
    order given).

    Redis is transport, not truth: if it is down, the items stay `queued` in
    the database and the recovery sweep enqueues them when it is back
    (`strict`: the error is raised instead, for the caller to undo its marks).
    """
    if not refs:
        return 0
    queue = get_queue(queue)
    try:
        with queue.connection.pipeline(transaction=False) as pipe:
            for item_id, attempt in refs:
                pipe.exists(Job.key_for(job_id(item_id, attempt)))
            refs = [ref for ref, exists in zip(refs, pipe.execute(), strict=True) if not exists]
        if not refs:
            return 0
        with queue.connection.pipeline() as pipe:
            queue.enqueue_many([  # pushed one by one: to the front, the last first
                queue.prepare_data(JOB_FUNCTION, (item_id, attempt), job_id=job_id(item_id, attempt),
                                   result_ttl=3600, failure_ttl=24 * 3600, at_front=front,
                                   description=f"item {item_id} attempt {attempt}")
                for item_id, attempt in (reversed(refs) if front else refs)], pipeline=pipe)
            pipe.execute()
    except Exception as exc:  # noqa: BLE001 - redis down: the sweep re-enqueues
        if strict:
            raise
        log.warning("could not enqueue %d item(s), the recovery sweep will retry: %s", len(refs), exc)
        return 0
    return len(refs)


def withdraw_items(refs: list[tuple[int, int]], *, queue: str | None = None) -> int:
    """Take the jobs of these (item id, attempt) pairs out of the queue, in one pipeline.

    Returns how many were still waiting. A job a worker already popped runs
    and finds its task stopped (the lease checks the task's status).
    """
    if not refs:
        return 0
    queue = get_queue(queue)
    try:
        with queue.connection.pipeline() as pipe:
            for item_id, attempt in refs:
                jid = job_id(item_id, attempt)
                pipe.lrem(queue.key, 0, jid)
                pipe.delete(Job.key_for(jid))
            answers = pipe.execute()
    except Exception as exc:  # noqa: BLE001 - redis down: the jobs exit without work when they run
        log.warning("could not withdraw %d job(s) from the queue: %s", len(refs), exc)
        return 0
    return sum(int(n) for n in answers[::2])
