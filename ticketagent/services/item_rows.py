"""A task's items written in one go, by PostgreSQL's COPY (and the checkpoints a go-live carries over).

An upload of 50,000 tickets is 50,000 rows. Through the ORM each value of
each row is prepared by its field (about 25 calls a row) and sent as a
parameter of a multi-row INSERT; COPY streams the rows as they are. The
columns that are the same for every new item (status, attempt, empty
lease, …) are prepared once, by the fields themselves, from a new Item:
a field added to the model later is covered without a change here.
"""

from django.db import connection
from django.utils import timezone
from psycopg.types.json import Jsonb

from ledger.keys import canonical_json
from ticketagent.eventlog.append import blobs_put, events_append
from ticketagent.models import Checkpoint, Event, EventType, Item

# Per row, from the uploaded ticket: model field name -> TicketRow attribute
ROW_FIELDS = ("row", "ticket_id", "customer_email", "customer_name", "subject", "body", "priority", "language",
              "metadata", "expected")
JSON_FIELDS = ("metadata", "expected")


def items_insert(*, task, rows, origins: dict | None = None) -> int:
    """Insert one item per row for `task` (in a transaction the caller holds); returns how many."""
    origins = origins or {}

    fields = [f for f in Item._meta.concrete_fields if not f.primary_key]
    varying = {*ROW_FIELDS, "task", "origin"}
    proto = Item(task=task, playbook_version_id=task.playbook_version_id, updated_at=timezone.now())
    constant = {f.name: f.get_db_prep_save(f.pre_save(proto, add=True) if f.name == "updated_at"
                                           else getattr(proto, f.attname), connection)
                for f in fields if f.name not in varying}
    names = [f.name for f in fields]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    table = connection.ops.quote_name(Item._meta.db_table)
    with connection.cursor() as cursor, cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for r in rows:
            values = {**constant, "task": task.pk, "origin": origins.get(r.ticket_id),
                      **{f: getattr(r, f) for f in ROW_FIELDS}}
            for name in JSON_FIELDS:
                values[name] = Jsonb(values[name] or {})
            copy.write_row([values[name] for name in names])
    return len(rows)


# carried step outputs up to this size (as JSON) travel in their event; bigger ones are stored once as a blob
INLINE_PLAN_CHARS = 2000


def plans_carry(task, carried: dict[str, dict], *, actor: str) -> int:
    """Inside the transaction creating `task`: each new item whose ticket is in `carried` (ticket id ->
    {"from_item", "plan_version", "schema_version", "cursor", "input_hash", "step_outputs"}: a reviewed
    rehearsal item's checkpoint) starts from those step outputs -- its checkpoint written now, under the
    task's playbook version, with a PLAN_CARRIED event (replay rebuilds the checkpoint from it)."""
    items = dict(task.items.filter(ticket_id__in=list(carried)).values_list("ticket_id", "id"))
    checkpoints, events, big = [], [], []
    for ticket_id, item_id in items.items():
        plan = carried[ticket_id]
        checkpoints.append(Checkpoint(item_id=item_id, task=task, plan_version=plan["plan_version"],
                                      playbook_version_id=task.playbook_version_id,
                                      schema_version=plan["schema_version"], cursor=plan["cursor"],
                                      input_hash=plan["input_hash"], step_outputs=plan["step_outputs"]))
        payload = {"from_item": plan["from_item"], "plan_version": plan["plan_version"],
                   "playbook_version": task.playbook_version_id, "schema_version": plan["schema_version"],
                   "cursor": plan["cursor"], "input_hash": plan["input_hash"]}
        if len(canonical_json(plan["step_outputs"])) <= INLINE_PLAN_CHARS:
            payload["output"] = plan["step_outputs"]
        else:
            big.append((payload, plan["step_outputs"]))
        events.append(Event(task_id=task.pk, item_id=item_id, type=EventType.PLAN_CARRIED, actor=actor,
                            payload=payload))
    for (payload, _), ref in zip(big, blobs_put([outputs for _, outputs in big]), strict=True):
        payload["output_ref"] = ref
    Checkpoint.objects.bulk_create(checkpoints)
    events_append(events)
    return len(checkpoints)
