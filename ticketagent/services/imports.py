"""Tasks from the helpdesk: a query's tickets, validated exactly as a file's rows (all or nothing), become a task."""

from django.conf import settings

from ticketagent.models import Task
from ticketagent.services import ServiceError
from ticketagent.services.budget import Budget
from ticketagent.services.readiness import helpdesk_ready
from ticketagent.services.tasks import task_create
from ticketagent.services.upload import UploadRejected
from ticketagent.sources.helpdesk import fetch_tickets, helpdesk_summary
from ticketagent.upload.rows import ALL_COLUMNS, ErrorCollector
from ticketagent.upload.validate import RowValidator


def query_rows(query: str, *, limit: int):
    """The query's tickets as validated rows, or UploadRejected listing every problem."""
    raw = fetch_tickets(query, limit=limit)
    if not raw:
        raise ServiceError("the query found no tickets; nothing was created")
    errors = ErrorCollector(limit=50)
    validator = RowValidator(errors)
    for number, ticket in enumerate(raw, 1):
        values = {c: str(ticket.get(c) or "") for c in ALL_COLUMNS if c != "metadata"}
        validator.validate(number, values, ticket.get("metadata") or {})
    if errors:
        raise UploadRejected(errors.result([]))
    return validator.rows


def task_import(*, query: str, user=None, name: str = "", allow_auto_close: bool = False,
                notify_channel: str = "helpdesk", failure_threshold: int | None = None,
                limit: int | None = None, playbook_version=None, rehearsal: bool = False,
                budget: Budget | None = None) -> Task:
    """A task from a helpdesk query: each item keeps the helpdesk's ticket id, so the agent acts on that ticket."""
    rows = query_rows(query, limit=limit or settings.UPLOAD_MAX_ROWS)
    if not rehearsal:
        helpdesk_ready(notify_channel=notify_channel)
    label = helpdesk_summary()["label"]
    return task_create(rows=rows, name=name or f"{label}: {query}"[:200], user=user,
                       filename=f"{label} query: {query}"[:255], allow_auto_close=allow_auto_close,
                       notify_channel=notify_channel, failure_threshold=failure_threshold,
                       playbook_version=playbook_version, rehearsal=rehearsal, budget=budget)
