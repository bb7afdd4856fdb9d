"""Before a task is created: the channels it will use answer as configured (a check that writes nothing).

So wrong credentials or a helpdesk that is down are one clear error at
upload, not fifty failed items.
"""

import time

from django.conf import settings

from ticketagent.channels.registry import get_channel
from ticketagent.services import ServiceError
from ticketagent.sources.helpdesk import helpdesk_summary

CHECK_OK_SECONDS = 60.0
_last_ok: dict[str, float] = {}  # channel name -> when its check last passed


def helpdesk_ready(*, notify_channel: str = "helpdesk") -> None:
    """Raise ServiceError naming the problem if a channel the task will use does not answer as configured.

    A passing check is trusted for CHECK_OK_SECONDS; HELPDESK_CHECK_BEFORE_TASKS=false turns the check off.
    """
    if not settings.HELPDESK_CHECK_BEFORE_TASKS:
        return
    names = ["helpdesk"] + (["email"] if notify_channel == "email" else [])
    for name in names:
        if time.monotonic() - _last_ok.get(name, -CHECK_OK_SECONDS) < CHECK_OK_SECONDS:
            continue
        problems = get_channel(name).check()
        if problems:
            where = helpdesk_summary()["label"] if name == "helpdesk" else "the mail server"
            raise ServiceError(f"{where} is not ready, so no task was created: {'; '.join(problems)}")
        _last_ok[name] = time.monotonic()
