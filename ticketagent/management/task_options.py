"""The options every command that creates a task shares: name, channel, automatic close, threshold, budget, creator."""

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from ticketagent.models import NotifyChannel
from ticketagent.playbooks.services import version_named
from ticketagent.services import ServiceError
from ticketagent.services.budget import budget_parse


def add_task_options(parser, *, name_default: str) -> None:
    parser.add_argument("--name", default="", help=f"task name (default: {name_default})")
    parser.add_argument("--allow-auto-close", action="store_true",
                        help="let the agent close tickets without an operator's approval")
    parser.add_argument("--notify-channel", choices=NotifyChannel.values, default=NotifyChannel.HELPDESK,
                        help="how customers are notified (default: helpdesk)")
    parser.add_argument("--failure-threshold", type=int, default=None,
                        help="consecutive failed items that suspend the task (default: SUSPEND_AFTER_FAILURES)")
    parser.add_argument("--budget", default="", metavar="AMOUNT",
                        help="a budget for the model calls, in USD (5, $5.00) or tokens (200000tokens, '200k tokens'); "
                             "reaching it suspends the task")
    parser.add_argument("--user", default=None, help="username recorded as the task's creator")
    parser.add_argument("--playbook", default="", metavar="NAME[:VERSION]",
                        help="the playbook (and published version) the task runs on (default: the first "
                             "playbook's latest published version)")
    parser.add_argument("--rehearsal", action="store_true",
                        help="a rehearsal: the model steps and rules run for real, nothing is sent")


def task_options(options: dict) -> dict:
    """The service's keyword arguments from the parsed options, or CommandError naming the bad one."""
    threshold = options["failure_threshold"]
    if threshold is not None and threshold < 1:
        raise CommandError("--failure-threshold must be at least 1")
    user = None
    if options["user"]:
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"user {options['user']!r} does not exist")
    try:
        version = version_named(options["playbook"]) if options["playbook"] else None
        budget = budget_parse(options["budget"])
    except ServiceError as exc:
        raise CommandError(str(exc).replace("budget:", "--budget:", 1)) from None
    return {"name": options["name"], "allow_auto_close": options["allow_auto_close"],
            "notify_channel": options["notify_channel"], "failure_threshold": threshold, "user": user,
            "playbook_version": version, "rehearsal": options["rehearsal"], "budget": budget}
