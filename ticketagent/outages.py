"""The record of outside APIs' outages (`ApiOutage`): written by a governor as one begins and ends; a pace reads it.

Redis holds an outage while it lasts (`governor`); these rows are what
remains of it, so that a task's rate and ETA count only the time it could
run (`web.pace`). A row that cannot be written is logged and skipped: the
record serves the numbers, never the call.
"""

import logging
from datetime import datetime

from django.utils import timezone

from ticketagent.models import ApiOutage

log = logging.getLogger(__name__)

MODEL_API = "the model API"  # the governor's `what` for a model endpoint (`governor.governor_for`)


class OutageLog:
    """What a governor calls when its API goes down (`began`) and comes back (`ended`)."""

    def began(self, what: str, endpoint: str) -> None:
        try:
            now = timezone.now()
            # an outage whose end Redis forgot (flushed, restarted) ends where the new one begins
            ApiOutage.objects.filter(what=what, endpoint=endpoint, ended_at=None).update(ended_at=now)
            ApiOutage.objects.create(what=what, endpoint=endpoint, started_at=now)
        except Exception:  # noqa: BLE001 - the record serves the numbers, never the call
            log.warning("%s %s: the outage could not be recorded", what, endpoint, exc_info=True)

    def ended(self, what: str, endpoint: str) -> None:
        try:
            ApiOutage.objects.filter(what=what, endpoint=endpoint, ended_at=None).update(ended_at=timezone.now())
        except Exception:  # noqa: BLE001 - the record serves the numbers, never the call
            log.warning("%s %s: the outage's end could not be recorded", what, endpoint, exc_info=True)


def model_outages(since: datetime) -> list[tuple[datetime, datetime | None]]:
    """The model API's outages that lasted into `since` or began after it, as (since, until) (until None: not
    over), oldest first. One deployment runs one model endpoint at a time; every one of its outages counts."""
    return list(ApiOutage.objects.filter(what=MODEL_API).exclude(ended_at__lt=since)
                .order_by("started_at").values_list("started_at", "ended_at"))
