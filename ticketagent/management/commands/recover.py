"""`manage.py recover [--loop]`: one recovery pass, or a process that takes its turn at the sweep like the
workers (`ticketagent.scheduling.sweep`); a deployment needs none, its workers sweep."""

from django.core.management.base import BaseCommand

from ticketagent.scheduling.db_sessions import session_limits
from ticketagent.scheduling.recovery import recover_once
from ticketagent.scheduling.sweep import recover_loop


class Command(BaseCommand):
    help = "Run one recovery pass, or take a turn at the sweep like a worker (--loop)."

    def add_arguments(self, parser):
        parser.add_argument("--loop", action="store_true", help="keep sweeping every --interval seconds")
        parser.add_argument("--interval", type=float, default=None, help="seconds between passes")

    def handle(self, *args, loop=False, interval=None, **options):
        session_limits("sweep")
        if loop:
            self.stdout.write("taking its turn at the recovery sweep; Ctrl-C stops it")
            try:
                recover_loop(interval=interval)
            except KeyboardInterrupt:
                pass
            return
        stats = recover_once()
        self.stdout.write(", ".join(f"{k}: {v}" for k, v in stats.items()))
