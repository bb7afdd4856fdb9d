"""Upload: a validated batch file becomes a task, or nothing is created."""

from django.conf import settings

from ticketagent.models import Task
from ticketagent.playbooks.models import PlaybookVersion
from ticketagent.playbooks.services import published_spec, version_default
from ticketagent.services.budget import Budget
from ticketagent.services.readiness import helpdesk_ready
from ticketagent.services.tasks import task_create
from ticketagent.upload.parse import parse_batch
from ticketagent.upload.rows import RowError


class UploadRejected(Exception):
    """The file had errors; nothing was created. `errors` lists every one."""

    def __init__(self, errors):
        super().__init__(f"{len(errors)} error(s) in the file")
        self.errors = errors


def expected_rejected(rows, version: PlaybookVersion) -> list[RowError]:
    """Rows whose expected category the playbook version does not have (each named with its row)."""
    names = [c.name for c in published_spec(version).categories]
    return [RowError(r.row, "expected_category", f"{r.expected['category']!r} is not a category of {version.label} "
                                                 f"({', '.join(names)})")
            for r in rows if r.expected.get("category") and r.expected["category"] not in names][:50]


def task_upload(*, data: bytes, filename: str, user=None, name: str = "", allow_auto_close: bool = False,
                notify_channel: str = "helpdesk", failure_threshold: int | None = None,
                playbook_version: PlaybookVersion | None = None, rehearsal: bool = False,
                budget: Budget | None = None) -> Task:
    """Parse and validate a whole batch; create the task only if every row is good and the helpdesk is ready
    (a rehearsal sends nothing: it needs no helpdesk)."""
    result = parse_batch(data, filename, max_bytes=settings.UPLOAD_MAX_BYTES, max_rows=settings.UPLOAD_MAX_ROWS)
    if not result.ok:
        raise UploadRejected(result.errors)
    version = playbook_version or version_default()
    errors = expected_rejected(result.rows, version)
    if errors:
        raise UploadRejected(errors)
    if not rehearsal:
        helpdesk_ready(notify_channel=notify_channel)
    return task_create(rows=result.rows, name=name or filename, user=user, filename=filename,
                       allow_auto_close=allow_auto_close, notify_channel=notify_channel,
                       failure_threshold=failure_threshold, playbook_version=version, rehearsal=rehearsal,
                       budget=budget)
