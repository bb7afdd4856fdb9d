"""`manage.py rt-setup`: the RT data file that creates what the agent needs in Request Tracker (sends nothing)."""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from ticketagent.channels.rt_setup import DEFAULT_GROUP, SetupError, rt_datafile


class Command(BaseCommand):
    help = ("Write the RT data file that creates the transaction custom field, the escalation queue, a group "
            "holding the agent's RT user and that group's rights. An RT administrator applies it on the RT host: "
            "rt-setup-database-5 --action insert --datafile FILE (safe to apply again). Defaults come from "
            "HELPDESK_USER, RT_CUSTOM_FIELD, RT_ESCALATION_QUEUE and RT_ESCALATION_OWNER.")

    def add_arguments(self, parser):
        parser.add_argument("--queue", action="append", default=[], dest="queues",
                            help="a queue the agent acts in (repeat for several; created when missing)")
        parser.add_argument("--user", default=None, help="the RT user the agent acts as (default: HELPDESK_USER)")
        parser.add_argument("--group", default=DEFAULT_GROUP, help=f"the group to create (default: {DEFAULT_GROUP})")
        parser.add_argument("--escalation-queue", default=None, help="default: RT_ESCALATION_QUEUE")
        parser.add_argument("--escalation-owner", default=None, help="default: RT_ESCALATION_OWNER")
        parser.add_argument("--output", "-o", default="-", help="the file to write (default: standard output)")

    def handle(self, *args, queues, user, group, escalation_queue, escalation_owner, output, **options):
        user = user if user is not None else settings.HELPDESK_USER
        if not user:
            raise CommandError("no RT user: pass --user or set HELPDESK_USER")
        try:
            text = rt_datafile(
                user=user, queues=queues, group=group,
                custom_field=getattr(settings, "RT_CUSTOM_FIELD", "") or "IdempotencyKey",
                escalation_queue=escalation_queue if escalation_queue is not None else settings.RT_ESCALATION_QUEUE,
                escalation_owner=escalation_owner if escalation_owner is not None else settings.RT_ESCALATION_OWNER)
        except SetupError as exc:
            raise CommandError(str(exc)) from None
        if output == "-":
            self.stdout.write(text, ending="")
            return
        Path(output).write_text(text)
        self.stderr.write(f"wrote {output}: apply it on the RT host with "
                          f"rt-setup-database-5 --action insert --datafile {output}")
