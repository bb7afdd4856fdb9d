"""``python manage.py sandbox`` -- run the sandbox helpdesk + mail server.

A thin wrapper around :func:`ticketagent.sandbox.server.serve` (which is
standard-library only); see ``docs/sandbox.md``.
"""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from ticketagent.sandbox.server import serve


class Command(BaseCommand):
    help = (
        "Run the sandbox helpdesk (HTTP JSON API) and mail server (SMTP). "
        'Prints {"http": port, "smtp": port} on stdout, then serves until SIGTERM/SIGINT.'
    )
    requires_system_checks: list[str] = []  # noqa: RUF012 - Django API

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument(
            "--port", type=int, default=8025, help="HTTP port (0 = any free port)"
        )
        parser.add_argument(
            "--smtp-port", type=int, default=8026, help="SMTP port (0 = any free port)"
        )
        parser.add_argument(
            "--db",
            default="var/sandbox.sqlite3",
            help="SQLite file for deliveries; relative paths are resolved against BASE_DIR "
            "(default: var/sandbox.sqlite3; ':memory:' for none)",
        )
        parser.add_argument(
            "--ignore-keys",
            action="store_true",
            help="record every request; do not dedupe on Idempotency-Key / Message-ID",
        )
        parser.add_argument(
            "--quiet", action="store_true", help="do not log requests to stderr"
        )

    def handle(self, *args, **options):
        db = options["db"]
        if db and db != ":memory:" and not Path(db).is_absolute():
            base = getattr(settings, "BASE_DIR", None)
            db = str(Path(base) / db) if base else str(Path(db).resolve())
        rc = serve(
            host=options["host"],
            port=options["port"],
            smtp_port=options["smtp_port"],
            db=db if db != ":memory:" else None,
            honor_keys=not options["ignore_keys"],
            quiet=options["quiet"] or options["verbosity"] == 0,
        )
        if rc:
            raise CommandError(f"sandbox exited with status {rc}")
