"""Upload: a validated batch file becomes a task, or nothing is created."""

from django.conf import settings

from ticketagent.models import Task
from ticketagent.services.readiness import helpdesk_ready
from ticketagent.services.tasks import task_create
from ticketagent.upload.parse import parse_batch


class UploadRejected(Exception):
    """The file had errors; nothing was created. `errors` lists every one."""

    def __init__(self, errors):
        super().__init__(f"{len(errors)} error(s) in the file")
        self.errors = errors


def task_upload(*, data: bytes, filename: str, user=None, name: str = "", allow_auto_close: bool = False,
                notify_channel: str = "helpdesk", failure_threshold: int | None = None) -> Task:
    """Parse and validate a whole batch; create the task only if every row is good and the helpdesk is ready."""
    result = parse_batch(data, filename, max_bytes=settings.UPLOAD_MAX_BYTES, max_rows=settings.UPLOAD_MAX_ROWS)
    if not result.ok:
        raise UploadRejected(result.errors)
    helpdesk_ready(notify_channel=notify_channel)
    return task_create(rows=result.rows, name=name or filename, user=user, filename=filename,
                       allow_auto_close=allow_auto_close, notify_channel=notify_channel,
                       failure_threshold=failure_threshold)
