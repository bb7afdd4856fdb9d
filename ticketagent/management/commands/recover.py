"""`manage.py recover [--loop]`: the recovery sweep, once or beside the workers."""

from django.core.management.base import BaseCommand

from ticketagent.scheduling.db_sessions import session_limits
from ticketagent.scheduling.recovery import recover_loop, recover_once


class Command(BaseCommand):
    help = "Run the recovery sweep once, or in a loop beside the workers (--loop)."

    def add_arguments(self, parser):
        parser.add_argument("--loop", action="store_true", help="keep sweeping every --interval seconds")
        parser.add_argument("--interval", type=float, default=None, help="seconds between passes")

    def handle(self, *args, loop=False, interval=None, **options):
        session_limits("sweep")
        if loop:
            self.stdout.write("recovery sweep running; Ctrl-C stops it")
            try:
                recover_loop(interval=interval)
            except KeyboardInterrupt:
                pass
            return
        stats = recover_once()
        self.stdout.write(", ".join(f"{k}: {v}" for k, v in stats.items()))
