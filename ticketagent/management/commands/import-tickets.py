"""`manage.py import-tickets QUERY`: a task from a helpdesk query, with the upload's checks, all or nothing."""

from django.core.management.base import BaseCommand, CommandError

from ticketagent.management.task_options import add_task_options, task_options
from ticketagent.services import ServiceError
from ticketagent.services.imports import task_import
from ticketagent.services.upload import UploadRejected
from ticketagent.sources import SourceError
from ticketagent.sources.helpdesk import helpdesk_summary


class Command(BaseCommand):
    help = ("Create a task from a helpdesk query (HELPDESK_KIND=rt: a TicketSQL search; zendesk: view:ID or a "
            "search). Every ticket is validated like an uploaded row; any error creates nothing.")

    def add_arguments(self, parser):
        parser.add_argument("query", help="the helpdesk query, e.g. \"Queue = 'General' AND Status = 'new'\"")
        parser.add_argument("--limit", type=int, default=500, help="at most this many tickets (default: 500)")
        add_task_options(parser, name_default="the helpdesk and the query")

    def handle(self, *args, query, limit, **options):
        if limit < 1:
            raise CommandError("--limit must be at least 1")
        creation = task_options(options)
        where = helpdesk_summary()
        self.stdout.write(f"querying {where['label']} at {where['url']}: {query}")
        try:
            task = task_import(query=query, limit=limit, **creation)
        except UploadRejected as exc:
            for error in exc.errors:
                self.stderr.write(f"query: {error}")
            raise CommandError(f"the query's tickets were rejected: {len(exc.errors)} error(s); nothing was "
                               "created") from None
        except (ServiceError, SourceError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(self.style.SUCCESS(f"task {task.pk} created with {task.items.count()} item(s)"))
