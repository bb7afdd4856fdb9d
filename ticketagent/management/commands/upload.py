"""`manage.py upload FILE`: a ticket batch from a shell, with the upload page's checks."""

from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from ticketagent.models import NotifyChannel
from ticketagent.services import ServiceError
from ticketagent.services.upload import UploadRejected, task_upload


class Command(BaseCommand):
    help = "Upload a CSV or JSONL ticket batch as a new task (the same checks as the upload page)."

    def add_arguments(self, parser):
        parser.add_argument("file", help="path to a .csv or .jsonl file")
        parser.add_argument("--name", default="", help="task name (default: the file name)")
        parser.add_argument("--allow-auto-close", action="store_true",
                            help="let the agent close tickets without an operator's approval")
        parser.add_argument("--notify-channel", choices=NotifyChannel.values, default=NotifyChannel.HELPDESK)
        parser.add_argument("--failure-threshold", type=int, default=None,
                            help="consecutive failed items that suspend the task")
        parser.add_argument("--user", default=None, help="username recorded as the uploader")

    def handle(self, *args, file, name, allow_auto_close, notify_channel, failure_threshold, user, **options):
        path = Path(file)
        if not path.is_file():
            raise CommandError(f"{file}: no such file")
        if failure_threshold is not None and failure_threshold < 1:
            raise CommandError("--failure-threshold must be at least 1")
        uploader = None
        if user:
            uploader = get_user_model().objects.filter(username=user).first()
            if uploader is None:
                raise CommandError(f"user {user!r} does not exist")
        try:
            task = task_upload(data=path.read_bytes(), filename=path.name, user=uploader, name=name,
                               allow_auto_close=allow_auto_close, notify_channel=notify_channel,
                               failure_threshold=failure_threshold)
        except UploadRejected as exc:
            for error in exc.errors:
                self.stderr.write(f"{path.name}: {error}")
            raise CommandError(f"{path.name} was rejected: {len(exc.errors)} error(s); nothing was created") from None
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(self.style.SUCCESS(f"task {task.pk} created with {task.items.count()} item(s)"))
