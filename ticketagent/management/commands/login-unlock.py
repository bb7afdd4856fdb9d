"""`manage.py login-unlock [NAME] [--client ADDRESS]`: lift a failed-login limit now instead of at the window's end."""

from django.core.management.base import BaseCommand, CommandError

from ticketagent.web.ratelimit import unlock


class Command(BaseCommand):
    help = ("Start fresh failed-login counters for a user name and/or a client address, so the next login is "
            "not refused (otherwise the limit lifts by itself within a minute).")

    def add_arguments(self, parser):
        parser.add_argument("username", nargs="?", default=None, help="the user name whose limit is lifted")
        parser.add_argument("--client", default=None, help="a client address (IP) whose limit is lifted")

    def handle(self, *args, username=None, client=None, **options):
        if not username and not client:
            raise CommandError("name a user name, a --client address, or both")
        for what in unlock(username=username, client=client):
            self.stdout.write(f"failed-login limit lifted for the {what}")
