"""`manage.py upload FILE`: a ticket batch from a shell, with the upload page's checks."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from ticketagent.management.task_options import add_task_options, task_options
from ticketagent.services import ServiceError
from ticketagent.services.upload import UploadRejected, task_upload


class Command(BaseCommand):
    help = "Upload a CSV or JSONL ticket batch as a new task (the same checks as the upload page)."

    def add_arguments(self, parser):
        parser.add_argument("file", help="path to a .csv or .jsonl file")
        add_task_options(parser, name_default="the file name")

    def handle(self, *args, file, **options):
        path = Path(file)
        if not path.is_file():
            raise CommandError(f"{file}: no such file")
        try:
            task = task_upload(data=path.read_bytes(), filename=path.name, **task_options(options))
        except UploadRejected as exc:
            for error in exc.errors:
                self.stderr.write(f"{path.name}: {error}")
            raise CommandError(f"{path.name} was rejected: {len(exc.errors)} error(s); nothing was created") from None
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(self.style.SUCCESS(f"task {task.pk} created with {task.items.count()} item(s)"))
