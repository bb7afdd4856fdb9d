"""The lease: which worker may write an item, and the fence every phase checks.

An item is only written by the worker holding its lease (`lease_token`);
every phase locks the item row and checks that token, so a worker whose
lease was taken over cannot write anything. A heartbeat thread extends the
lease while a model or channel call runs.
"""

import logging
import os
import socket
import threading
from dataclasses import dataclass, field

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import Subquery
from django.utils import timezone

from ledger.gate import Fenced
from ledger.models import Effect
from ledger.services import effects_mark_unknown
from ledger.statements import Fence
from ticketagent.eventlog.append import event_append
from ticketagent.models import ENDED_ITEM_STATUSES, EventType, Item, ItemStatus, Task

log = logging.getLogger(__name__)


class LeaseLost(Fenced):
    """This worker no longer holds the item: stop without writing."""


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def lease_deadline():
    return timezone.now() + timezone.timedelta(seconds=settings.LEASE_SECONDS)


class Heartbeat(threading.Thread):
    """Extends the lease while a long call runs; notices when it was lost."""

    def __init__(self, item_id: int, token: str):
        super().__init__(daemon=True, name=f"heartbeat-{item_id}")
        self.item_id, self.token = item_id, token
        self.stopped = threading.Event()
        self.lost = False

    def run(self):
        try:
            while not self.stopped.wait(settings.HEARTBEAT_SECONDS):
                try:
                    n = Item.objects.filter(pk=self.item_id, lease_token=self.token,
                                            status=ItemStatus.RUNNING).update(lease_expires_at=lease_deadline())
                    if not n:
                        self.lost = True
                        return
                except Exception:  # noqa: BLE001 - a failed beat is retried on the next tick
                    log.warning("heartbeat for item %s failed", self.item_id, exc_info=True)
                    close_old_connections()
        finally:
            connection.close()

    def stop(self):
        self.stopped.set()
        self.join(timeout=5)


# item id -> task id: never changes, so a worker looks it up once per item,
# not once per phase (ten phases an item).
_TASK_OF_ITEM: dict[int, int] = {}


def task_of_item(item_id: int, *, fresh: bool = False) -> int | None:
    task_id = None if fresh else _TASK_OF_ITEM.get(item_id)
    if task_id is None:
        task_id = Item.objects.filter(pk=item_id).values_list("task_id", flat=True).first()
        if task_id is not None:
            if len(_TASK_OF_ITEM) > 10_000:
                _TASK_OF_ITEM.clear()
            _TASK_OF_ITEM[item_id] = task_id
    return task_id


def task_of_item_locked(item_id: int) -> Task | None:
    """Inside a transaction: the item's task, locked, in one statement (and remembered for the phases)."""
    of_item = Subquery(Item.objects.filter(pk=item_id).values("task_id"))
    task = Task.objects.select_for_update(no_key=True).filter(pk=of_item).first()
    if task is not None:
        if len(_TASK_OF_ITEM) > 10_000:
            _TASK_OF_ITEM.clear()
        _TASK_OF_ITEM[item_id] = task.pk
    return task


def lock_held(item_id: int, token: str) -> tuple[Task, Item]:
    """Inside a transaction: lock task and item, or raise LeaseLost."""
    task_id = task_of_item(item_id)
    task = Task.objects.select_for_update(no_key=True).filter(pk=task_id).first() if task_id is not None else None
    if task is None:
        raise LeaseLost(f"item {item_id} is gone")
    item = (Item.objects.select_for_update(no_key=True)
            .filter(pk=item_id, lease_token=token, status=ItemStatus.RUNNING).first())
    if item is None:
        raise LeaseLost(f"item {item_id}: lease {token[:8]} was taken over")
    if item.task_id != task.pk:  # a stale entry (ids reused after a test database flush): look it up again
        _TASK_OF_ITEM.pop(item_id, None)
        return lock_held(item_id, token)
    return task, item


def release(item: Item, status: str) -> None:
    item.status = status
    item.lease_token = ""
    item.lease_owner = ""
    item.lease_expires_at = None
    if status in ENDED_ITEM_STATUSES:
        item.finished_at = timezone.now()


def item_take_over(item: Item, *, actor: str, why: str) -> list[Effect]:
    """Inside a transaction holding the item lock: fence the old lease holder and
    turn its intents into unknowns."""
    old = item.lease_owner
    item.lease_token = ""
    item.lease_owner = ""
    item.lease_expires_at = None
    unknown = effects_mark_unknown(owner_item=item.ref, actor=actor,
                                   note=f"{why}; the worker {old or '?'} held it: outcome cannot be known")
    event_append(task_id=item.task_id, item_id=item.pk, type=EventType.RECOVERED, actor=actor, payload={
        "previous_owner": old, "why": why, "unknown_effects": [e.pk for e in unknown],
    })
    return unknown


@dataclass
class ItemRun:
    """The worker's side of one leased item. Only the lease holder writes the
    item's checkpoint, so `cursor` and `outputs` are what the database holds;
    they move on once the phase that wrote them has committed."""

    item: Item
    token: str
    cursor: int
    outputs: dict
    task_status: str = ""
    stopped: bool = False
    # effect steps the decision did not choose, not yet recorded: they are
    # written (STEP_SKIPPED) with the next recovery point
    pending: list = field(default_factory=list)
    # (Intent, Effect, blocked): the next effect's intent, committed with the
    # last recovery point (chained intents); its call is still to be made
    chained: tuple | None = None
    # (Task, Item) locked by `lock_run` in the current transaction
    locked: tuple | None = None
    finished: bool = False  # the item's end was recorded with its last effect's outcome


def lock_run(run: ItemRun) -> None:
    """Inside a transaction: `lock_held` (task, then item) for a phase that may
    end the item; the task's status read as `hold` reads it."""
    run.locked = lock_held(run.item.pk, run.token)
    run.task_status = run.locked[0].status


def hold(run: ItemRun) -> None:
    """Inside a transaction: lock the item if this worker still holds its
    lease, and read its task's status (read, not locked: a pause or cancel
    that commits meanwhile is seen by the next phase)."""
    # (model instances, not values_list(): only they keep `OF item`, and
    # locking the task here would invert the lock order)
    held = list(Item.objects.select_for_update(no_key=True, of=("self",)).select_related("task")
                .only("id", "task_id", "task__status").order_by()
                .filter(pk=run.item.pk, lease_token=run.token, status=ItemStatus.RUNNING))
    if not held:
        raise LeaseLost(f"item {run.item.pk}: lease {run.token[:8]} was taken over")
    run.task_status = held[0].task.status


def lease_fence(run: ItemRun) -> Fence:
    """`hold(run)` as a `Fence` the gate folds into its own statements on
    PostgreSQL (and the condition a step's checkpoint update moves on): the
    item still leased to this worker, its row locked where the database
    locks rows."""
    item = connection.ops.quote_name(Item._meta.db_table)
    lock = " FOR NO KEY UPDATE" if connection.features.has_select_for_no_key_update else ""
    return Fence(condition=f"EXISTS (SELECT 1 FROM {item} WHERE id = %s AND lease_token = %s AND status = %s{lock})",
                 params=(run.item.pk, run.token, ItemStatus.RUNNING), check=lambda: hold(run))
