"""The lease's read, its locks and the checkpoint's move: the statements of an item's phases, hand-written, one module.

Every phase of a running item locks it (`lock_item`, 5–7 an item, or with
its task first, `lock_task_and_item`: a phase that writes the task -- an
item failed, waiting for a person or handed back, a task that spends a
budget), the lease holds its task as it is (`lock_task_of_item(hold=True)`,
`FOR SHARE`: `phases.lease_acquire`; locked to write only when it must), and
every recovery point moves its checkpoint (`checkpoint_move`). Each lock
answers None when the lease no longer holds the item: the caller
(`phases.phase`) raises `LeaseLost`. Said through
the ORM, building them cost a worker 0.7–1.5 ms of CPU each -- more than
the statements themselves on the server, and, with many items in flight in
one process, time every other item waits for the interpreter. Here they
are one constant string each, which PostgreSQL also keeps prepared per
session (`DB_PREPARE_THRESHOLD`). Everything else the pipeline writes goes
through the ORM; only this module of the pipeline runs SQL (`make structure`).
"""

from django.db import connection
from django.utils import timezone

from ticketagent.models import Checkpoint, Item, ItemStatus, PlaybookVersion, Task

_quote = connection.ops.quote_name
_ITEM, _TASK, _CHECKPOINT, _VERSION = (_quote(m._meta.db_table) for m in (Item, Task, Checkpoint, PlaybookVersion))


def _columns(model, alias: str) -> str:
    return ", ".join(f"{alias}.{_quote(f.column)}" for f in model._meta.concrete_fields)


# What a lease reads, in one statement: the item, locked (`OF` the item only), its checkpoint (none before its first
# lease), its playbook version, and PostgreSQL's clock (as Django's `Now()`: the statement's time).
_ITEM_FOR_LEASE = (f"SELECT {_columns(Item, 'i')}, {_columns(Checkpoint, 'c')}, {_columns(PlaybookVersion, 'v')}, "
                   f"statement_timestamp() FROM {_ITEM} i LEFT JOIN {_CHECKPOINT} c ON c.item_id = i.id "
                   f"JOIN {_VERSION} v ON v.id = i.playbook_version_id WHERE i.id = %s FOR NO KEY UPDATE OF i")

# The item, locked if this lease still holds it (`OF` the item only: the task is read, not locked -- locking it here
# would invert the lock order, the task before the item), and its task's status and run of failures.
_ITEM_LOCK = (f"SELECT t.status, t.consecutive_failures FROM {_ITEM} i JOIN {_TASK} t ON t.id = i.task_id "
              "WHERE i.id = %s AND i.lease_token = %s AND i.status = %s FOR NO KEY UPDATE OF i")

# The checkpoint moved from the cursor this worker knows (anything else moved it: the caller stops).
_CHECKPOINT_MOVE = (f"UPDATE {_CHECKPOINT} SET cursor = %s, step_outputs = %s, updated_at = %s "
                    "WHERE item_id = %s AND cursor = %s")

# The item's task, locked, found through the item (the task before the item: the lock order of every phase): to
# write it, or (`FOR SHARE`) held as it is -- a pause, a cancel or a write waits for it; another holder does not.
_TASK_LOCK = f"SELECT * FROM {_TASK} WHERE id = (SELECT task_id FROM {_ITEM} WHERE id = %s) FOR NO KEY UPDATE"
_TASK_HOLD = f"SELECT * FROM {_TASK} WHERE id = (SELECT task_id FROM {_ITEM} WHERE id = %s) FOR SHARE"

# The item, all of it, locked if this lease still holds it (after its task, `_TASK_LOCK`).
_ITEM_LEASED_LOCK = f"SELECT * FROM {_ITEM} WHERE id = %s AND lease_token = %s AND status = %s FOR NO KEY UPDATE"

_STEP_OUTPUTS = Checkpoint._meta.get_field("step_outputs")


def lock_item(item_id: int, token: str) -> tuple[str, int] | None:
    """Inside a transaction: lock the item if lease `token` still holds it; its task's status and consecutive
    failures (None: it does not)."""
    with connection.cursor() as cursor:
        cursor.execute(_ITEM_LOCK, [item_id, token, ItemStatus.RUNNING])
        row = cursor.fetchone()
    return (row[0], row[1]) if row else None


def lock_task_of_item(item_id: int, *, hold: bool = False) -> Task | None:
    """Inside a transaction: the item's task, locked to write it, or with `hold` only held as it is (None: no
    such item)."""
    return next(iter(Task.objects.raw(_TASK_HOLD if hold else _TASK_LOCK, [item_id])), None)


def lock_task_and_item(item_id: int, token: str) -> tuple[Task | None, Item | None]:
    """Inside a transaction: the item's task locked, then the item, locked if lease `token` still holds it
    (None for the item: it does not; None for both: no such item)."""
    task = lock_task_of_item(item_id)
    if task is None:
        return None, None
    return task, next(iter(Item.objects.raw(_ITEM_LEASED_LOCK, [item_id, token, ItemStatus.RUNNING])), None)


def checkpoint_move(item_id: int, *, cursor_from: int, cursor_to: int, outputs: dict) -> bool:
    """Inside a transaction holding the item: its checkpoint moved to `cursor_to` with `outputs`, if it was at
    `cursor_from` (False: it was not, nothing written)."""
    value = _STEP_OUTPUTS.get_db_prep_save(outputs, connection)
    with connection.cursor() as cursor:
        cursor.execute(_CHECKPOINT_MOVE, [cursor_to, value, timezone.now(), item_id, cursor_from])
        return cursor.rowcount == 1


def item_for_lease(item_id: int):
    """Inside a transaction: the item locked, with its playbook version, its checkpoint (None before its first
    lease) and PostgreSQL's `now` -- (item, checkpoint, now), or None: no such item."""
    with connection.cursor() as cursor:
        cursor.execute(_ITEM_FOR_LEASE, [item_id])
        row = cursor.fetchone()
    if row is None:
        return None
    models, start = [], 0
    for model in (Item, Checkpoint, PlaybookVersion):
        fields = model._meta.concrete_fields
        values = [f.from_db_value(v, None, connection) if v is not None and hasattr(f, "from_db_value") else v
                  for f, v in zip(fields, row[start:start + len(fields)], strict=True)]
        models.append(model.from_db(connection.alias, [f.attname for f in fields], values))
        start += len(fields)
    item, checkpoint, item.playbook_version = models
    return item, (checkpoint if checkpoint.pk is not None else None), row[-1]
