"""`manage.py replay TASK`: rebuild a task from its event log and compare with the tables."""

import json
import sys

from django.core.management.base import BaseCommand, CommandError

from ticketagent.eventlog.export import unescape
from ticketagent.eventlog.replay import diff, replay, tables_state, task_events
from ticketagent.models import Task


class Command(BaseCommand):
    help = ("Rebuild a task's checkpoints and ledger state from its events alone and diff them against the "
            "tables; exit 1 on any difference.")

    def add_arguments(self, parser):
        parser.add_argument("task", type=int, metavar="TASK",
                            help="the id of the task to replay (the number in /tasks/<id>/ and in `manage.py "
                                 "upload`'s output)")
        parser.add_argument("--from", dest="source", default=None,
                            help="replay an exported events.jsonl file instead of the stored events")

    def handle(self, *args, task, source=None, **options):
        if not Task.objects.filter(pk=task).exists():
            raise CommandError(f"task {task} does not exist")
        if source:
            try:
                with open(source, encoding="utf-8") as fh:
                    events = [unescape(json.loads(line)) for line in fh if line.strip()]
            except (OSError, ValueError) as exc:
                raise CommandError(f"{source}: {exc}") from None
        else:
            events = task_events(task)
        replayed = replay(events)
        differences = diff(replayed, tables_state(task))
        self.stdout.write(f"task {task}: {len(replayed['checkpoints'])} checkpoints, "
                          f"{len(replayed['effects'])} effects, {replayed['blocked_duplicates']} blocked duplicates "
                          "rebuilt from events")
        if differences:
            for line in differences:
                self.stdout.write(f"  {line}")
            self.stderr.write(f"{len(differences)} difference(s)")
            sys.exit(1)
        self.stdout.write(self.style.SUCCESS("replay matches the tables"))
