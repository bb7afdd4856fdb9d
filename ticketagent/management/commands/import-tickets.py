"""`manage.py import-tickets QUERY`: a task from a helpdesk query, with the upload's checks, all or nothing."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from ticketagent.models import NotifyChannel
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
        parser.add_argument("--name", default="", help="task name (default: the helpdesk and the query)")
        parser.add_argument("--allow-auto-close", action="store_true",
                            help="let the agent close tickets without an operator's approval")
        parser.add_argument("--notify-channel", choices=NotifyChannel.values, default=NotifyChannel.HELPDESK,
                            help="how customers are notified (default: helpdesk)")
        parser.add_argument("--failure-threshold", type=int, default=None,
                            help="consecutive failed items that suspend the task (default: SUSPEND_AFTER_FAILURES)")
        parser.add_argument("--user", default=None, help="username recorded as the task's creator")

    def handle(self, *args, query, limit, name, allow_auto_close, notify_channel, failure_threshold, user, **options):
        if limit < 1:
            raise CommandError("--limit must be at least 1")
        if failure_threshold is not None and failure_threshold < 1:
            raise CommandError("--failure-threshold must be at least 1")
        creator = None
        if user:
            creator = get_user_model().objects.filter(username=user).first()
            if creator is None:
                raise CommandError(f"user {user!r} does not exist")
        where = helpdesk_summary()
        self.stdout.write(f"querying {where['label']} at {where['url']}: {query}")
        try:
            task = task_import(query=query, user=creator, name=name, allow_auto_close=allow_auto_close,
                               notify_channel=notify_channel, failure_threshold=failure_threshold, limit=limit)
        except UploadRejected as exc:
            for error in exc.errors:
                self.stderr.write(f"query: {error}")
            raise CommandError(f"the query's tickets were rejected: {len(exc.errors)} error(s); nothing was "
                               "created") from None
        except (ServiceError, SourceError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(self.style.SUCCESS(f"task {task.pk} created with {task.items.count()} item(s)"))
