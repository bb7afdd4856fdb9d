"""`manage.py rt-setup`: the RT data file that sets up what the agent needs in Request Tracker, once RT has what
it relies on (reads RT, writes nothing there)."""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from ticketagent.channels.rt_rest import RTConfig
from ticketagent.channels.rt_setup import DEFAULT_GROUP, FLAGS, SetupError, rt_datafile, setup_needs
from ticketagent.channels.rt_setup_check import setup_check

# the settings a name falls back to when its flag is not given
SETTINGS = {"user": "HELPDESK_USER", "escalation_queue": "RT_ESCALATION_QUEUE",
            "escalation_owner": "RT_ESCALATION_OWNER"}


class Command(BaseCommand):
    help = ("Write the RT data file that creates the transaction custom field, a group holding the agent's RT user "
            "and that group's rights. First checks in RT (REST2, as HELPDESK_USER) that the user, the queues, the "
            "escalation queue and the escalation owner exist, and writes nothing if one does not (exit 1, naming "
            "it and where it is configured). An RT administrator applies the file on the RT host: "
            "rt-setup-database-5 --action insert --datafile FILE (safe to apply again; it checks the same names "
            "first and changes nothing if one is missing). Defaults come from HELPDESK_USER, RT_CUSTOM_FIELD, "
            "RT_ESCALATION_QUEUE and RT_ESCALATION_OWNER.")

    def add_arguments(self, parser):
        parser.add_argument("--queue", action="append", default=[], dest="queues",
                            help="a queue the agent acts in (repeat for several; it must exist in RT)")
        parser.add_argument("--user", default=None, help="the RT user the agent acts as (default: HELPDESK_USER)")
        parser.add_argument("--group", default=DEFAULT_GROUP, help=f"the group to create (default: {DEFAULT_GROUP})")
        parser.add_argument("--escalation-queue", default=None, help="default: RT_ESCALATION_QUEUE")
        parser.add_argument("--escalation-owner", default=None, help="default: RT_ESCALATION_OWNER")
        parser.add_argument("--output", "-o", default="-", help="the file to write (default: standard output)")
        parser.add_argument("--no-check", action="store_true",
                            help="write the file without looking in RT first (for an RT this host cannot reach; "
                                 "the file still checks the names when applied)")

    def handle(self, *args, queues, group, output, no_check, **options):
        given = {name: options[name] for name in SETTINGS}
        names = {name: getattr(settings, SETTINGS[name]) if value is None else value for name, value in given.items()}
        where = {name: FLAGS[name] if given[name] is not None else SETTINGS[name] for name in SETTINGS}
        if not names["user"]:
            raise CommandError("no RT user: pass --user or set HELPDESK_USER")
        try:
            text = rt_datafile(queues=queues, group=group, where=where,
                               custom_field=getattr(settings, "RT_CUSTOM_FIELD", "") or "IdempotencyKey", **names)
        except SetupError as exc:
            raise CommandError(str(exc)) from None
        if not no_check:
            self._check(setup_needs(queues=queues, where=where, **names))
        if output == "-":
            self.stdout.write(text, ending="")
            return
        Path(output).write_text(text)
        self.stderr.write(f"wrote {output}: apply it on the RT host with "
                          f"rt-setup-database-5 --action insert --datafile {output}")

    def _check(self, needs) -> None:
        """Raise CommandError, naming each, when RT lacks a user or queue the file relies on (nothing written)."""
        problems, unverified = setup_check(RTConfig.from_settings(), needs)
        for line in unverified:
            self.stderr.write(f"not verified from here: {line}")
        if problems:
            raise CommandError("nothing written: " + "; ".join(problems) + ". The agent's RT user (HELPDESK_USER, "
                               "Privileged) reads RT for this check; create what is missing in RT, or correct where "
                               "it is configured, then run rt-setup again (--no-check writes the file unchecked)")
