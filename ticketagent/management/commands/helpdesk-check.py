"""`manage.py helpdesk-check`: is the configured helpdesk (and mail server) reachable and usable? Writes nothing."""

from django.core.management.base import BaseCommand

from ticketagent.channels.registry import get_channel
from ticketagent.sources.helpdesk import helpdesk_summary


class Command(BaseCommand):
    help = ("Check the connection to the configured helpdesk (HELPDESK_KIND, HELPDESK_URL, credentials) and "
            "the mail server, and show what each can do for exactly-once. Writes nothing. Exit 1 on a problem.")

    def add_arguments(self, parser):
        parser.add_argument("--no-email", action="store_true", help="skip the mail server")

    def handle(self, *args, no_email=False, **options):
        where = helpdesk_summary()
        self.stdout.write(f"helpdesk: {where['label']} ({where['kind']}) at {where['url']}"
                          + (f" as {where['user']}" if where["user"] else ""))
        problems = self._check("helpdesk")
        if not no_email:
            problems += self._check("email")
        if problems:
            raise SystemExit(1)
        self.stdout.write(self.style.SUCCESS("ready"))

    def _check(self, name: str) -> list[str]:
        channel = get_channel(name)
        a = channel.abilities
        self.stdout.write(f"  {name}: {channel.label}")
        self.stdout.write(f"    key sent with each write: {a.key_carried or 'no'}"
                          + (" (the system refuses a repeat)" if a.honours_key else ""))
        self.stdout.write(f"    look-up by key: {a.lookup or 'no: its unknown effects go to review'}")
        # a channel may also say what it could not verify yet (an RT with no ticket)
        report = getattr(channel, "check_report", None)
        if report is not None:
            found = report()
            problems, unverified = found.problems, found.unverified
        else:
            problems, unverified = channel.check(), []
        for problem in problems:
            self.stderr.write(f"    problem: {problem}")
        for what in unverified:
            self.stdout.write(f"    not verified yet: {what}")
        if not problems:
            self.stdout.write("    connection: ok")
        return problems
