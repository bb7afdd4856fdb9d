from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from ticketagent.recovery import recover_once


class Command(BaseCommand):
    help = "Start an RQ worker for the ticket queue, after one recovery pass."

    def add_arguments(self, parser):
        parser.add_argument("--burst", action="store_true", help="exit when the queue is empty")
        parser.add_argument("--name", default=None, help="worker name (default: rq's)")
        parser.add_argument("--with-scheduler", action="store_true")

    def handle(self, *args, burst=False, name=None, with_scheduler=False, **options):
        try:
            stats = recover_once()
            self.stdout.write(f"recovery at start: {stats}")
        except Exception as exc:  # noqa: BLE001 - the worker still starts; the sweep loop retries
            self.stderr.write(f"recovery at start failed: {exc}")
        kwargs = {"burst": burst, "with_scheduler": with_scheduler}
        if name:
            kwargs["name"] = name
        call_command("rqworker", settings.RQ_QUEUE, **kwargs)
