"""The window: how many of a task's items wait in Redis at a time, and its refill from the database.

A task does not send all its items to Redis at once. At most a window of
its queued items has a job waiting (`enqueued_at` set); the others wait in
the database (`enqueued_at` null) and are sent as items start: once an
item's lease commits its task's window is topped up (`signals.item_started`),
and the recovery sweep tops up every active task's. One FIFO queue thus interleaves tasks, and
a new task's first window goes to the front of it: a small task uploaded
behind a big one starts at the next free worker and then shares the
workers with it, instead of waiting for all of its items (or a window of
them); and cancelling a task withdraws at most
a window of jobs. Picking the items and marking them is one statement
(`FOR NO KEY UPDATE SKIP LOCKED`: two refills never pick the same item), the jobs
go out in one Redis pipeline after it.
"""

import logging
import time

from django.conf import settings
from django.db import connection, transaction
from django.dispatch import receiver
from django.utils import timezone
from rq import Worker

from ticketagent.models import ACTIVE_TASK_STATUSES, Item, ItemStatus, Task
from ticketagent.scheduling import jobs
from ticketagent.signals import item_started, items_runnable, task_stopping

log = logging.getLogger(__name__)

_workers = {"count": 0, "at": -1e9}
WORKER_COUNT_SECONDS = 10.0

# One statement: how many of the task's queued items already wait in Redis,
# and the oldest of the others, up to the window, marked as sent (none while
# the task is not active), each with the helpdesk its task is bound to (its queue: `jobs.queue_name`).
_REFILL = """
WITH waiting AS (
    SELECT count(*) AS n FROM {item} WHERE task_id = %s AND status = %s AND enqueued_at IS NOT NULL
), picked AS (
    SELECT id FROM {item} WHERE task_id = %s AND status = %s AND enqueued_at IS NULL
      AND EXISTS (SELECT 1 FROM {task} WHERE id = %s AND status = ANY(%s))
    ORDER BY id LIMIT GREATEST(%s - (SELECT n FROM waiting), 0) FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE {item} SET enqueued_at = %s FROM picked WHERE {item}.id = picked.id
RETURNING {item}.id, {item}.attempt, (SELECT helpdesk_id FROM {task} WHERE id = %s)"""


def window_size() -> int:
    """QUEUE_WINDOW, or twice the item threads of the workers rq knows (each runs WORKER_THREADS items at once; counted
    at most every 10 s), at least 4."""
    if settings.QUEUE_WINDOW:
        return settings.QUEUE_WINDOW
    now = time.monotonic()
    if now - _workers["at"] > WORKER_COUNT_SECONDS:
        try:
            _workers["count"] = _threads_known()
        except Exception:  # noqa: BLE001 - Redis down: nothing can be sent anyway
            _workers["count"] = 0
        _workers["at"] = now
    return max(4, 2 * _workers["count"])


def _threads_known() -> int:
    """The item threads (WORKER_THREADS) of the workers on the queue (a worker that does not say how many has one)."""
    queue = jobs.get_queue()
    keys = [worker.key for worker in Worker.all(queue=queue)]
    with queue.connection.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.hget(key, "threads")
        threads = pipe.execute()
    return sum(int(value) if value and value.isdigit() else 1 for value in threads)


def window_refill(task_id: int, *, size: int | None = None, front: bool = False) -> int:
    """Top the task's window up: mark its oldest waiting items sent and enqueue them.

    Returns how many were sent. Outside a transaction it commits at once;
    inside one, the jobs go out after it commits. Nothing is sent for a task
    that is not active. `front`: the jobs go ahead of those already waiting
    (a new task's first window: it starts at the next free worker, then
    shares the workers with the tasks already running, refill by refill).
    """
    size = window_size() if size is None else size
    quote = connection.ops.quote_name
    sql = _REFILL.format(item=quote(Item._meta.db_table), task=quote(Task._meta.db_table))
    params = [task_id, ItemStatus.QUEUED, task_id, ItemStatus.QUEUED, task_id, list(ACTIVE_TASK_STATUSES), size,
              timezone.now(), task_id]  # the app's clock, as the sweep's
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = sorted(cursor.fetchall())
    if rows:  # the jobs go out once the marks commit (at once outside a transaction), on the task's queue
        refs, queue = [(pk, attempt) for pk, attempt, _ in rows], jobs.queue_name(rows[0][2])
        transaction.on_commit(lambda: _send(refs, queue, front))
    return len(rows)


def task_queue(task_id: int) -> str:
    """The queue of the task's items: its helpdesk's (`jobs.queue_name`), read as the task stands now."""
    return jobs.queue_name(Task.objects.filter(pk=task_id).values_list("helpdesk_id", flat=True).first())


def _send(refs: list[tuple[int, int]], queue: str, front: bool = False) -> None:
    try:
        jobs.enqueue_items(refs, queue=queue, strict=True, front=front)
    except Exception as exc:  # noqa: BLE001 - Redis down: the items wait in the database for the next refill
        log.warning("could not send %d job(s) to Redis; the recovery sweep will: %s", len(refs), exc)
        Item.objects.filter(pk__in=[pk for pk, _ in refs], status=ItemStatus.QUEUED).update(enqueued_at=None)


def windows_refill() -> int:
    """The sweep: top up the window of every active task with items waiting in the database."""
    waiting = Item.objects.filter(status=ItemStatus.QUEUED, enqueued_at__isnull=True)
    tasks = Task.objects.filter(status__in=ACTIVE_TASK_STATUSES).order_by("pk").values_list("pk", flat=True)
    size = window_size()
    return sum(window_refill(task_id, size=size) for task_id in tasks
               if waiting.filter(task_id=task_id).exists())


def window_withdraw(task_id: int) -> int:
    """Inside a transaction holding the task's lock, as it stops (cancel, pause):
    the task's jobs still waiting are taken out of Redis after commit, and
    its queued items marked not sent. Returns how many jobs that concerns."""
    sent = Item.objects.filter(task_id=task_id, status=ItemStatus.QUEUED, enqueued_at__isnull=False)
    refs = list(sent.values_list("pk", "attempt"))
    if refs:
        sent.update(enqueued_at=None)
        queue = task_queue(task_id)
        transaction.on_commit(lambda: jobs.withdraw_items(refs, queue=queue))
    return len(refs)


@receiver(items_runnable)
def _on_items_runnable(sender, *, task_id: int, front: bool = False, **kwargs) -> int:
    return window_refill(task_id, front=front)


@receiver(task_stopping)
def _on_task_stopping(sender, *, task_id: int, **kwargs) -> int:
    return window_withdraw(task_id)


@receiver(item_started)
def _on_item_started(sender, *, task_id: int, **kwargs) -> None:
    try:
        window_refill(task_id)
    except Exception:  # noqa: BLE001 - the sweep tops every window up too
        log.warning("could not top up the window of task %s after an item started", task_id, exc_info=True)
