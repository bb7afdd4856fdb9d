"""A task's items written in one go, by PostgreSQL's COPY.

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

from ticketagent.models import Item

# Per row, from the uploaded ticket: model field name -> TicketRow attribute
ROW_FIELDS = ("row", "ticket_id", "customer_email", "customer_name", "subject", "body", "priority", "language",
              "metadata")


def items_insert(*, task, rows, origins: dict | None = None) -> int:
    """Insert one item per row for `task` (in a transaction the caller holds); returns how many."""
    origins = origins or {}

    fields = [f for f in Item._meta.concrete_fields if not f.primary_key]
    varying = {*ROW_FIELDS, "task", "origin"}
    proto = Item(task=task, updated_at=timezone.now())
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
            values["metadata"] = Jsonb(values["metadata"] or {})
            copy.write_row([values[name] for name in names])
    return len(rows)
