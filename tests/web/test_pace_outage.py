"""A model API outage is time a task could not run: its rate and ETA after the outage are the ones it runs at.

Before: the outage's wait counted as running time. Twenty minutes down, then half a minute of work, and the rate
"over the last 5 minutes of running" was the half minute's items over five minutes: the ETA came out 5-9x the
time that was actually left. Here the clock and the rate are injected (a simulated run), the outage is recorded
as a governor records it, and the ETA is compared with the time the simulated run then really took.
"""

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from ticketagent.governor import Governor
from ticketagent.models import ApiOutage, Item, ItemStatus, Task, TaskStatus
from ticketagent.outages import MODEL_API, OutageLog, model_outages
from ticketagent.web.pace import live_pace
from ticketagent.web.selectors import task_progress

from ..factories import make_task

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SECONDS_PER_ITEM = 3.0  # the injected rate: 20 items a minute
OUTAGE = (90.0, 90.0 + 20 * 60)  # down from 90 s to 21.5 min
ITEMS = 200


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def simulated_ends() -> list[float]:
    """When each item ends, in seconds from T0: one every SECONDS_PER_ITEM (a little uneven) while the model API
    answers; nothing ends while it is down, and the work goes on where it stopped when it is back."""
    ends, clock, waited = [], 0.0, False
    for k in range(ITEMS):
        clock += SECONDS_PER_ITEM * (0.8 if k % 2 else 1.2)
        if clock > OUTAGE[0] and not waited:  # the item in flight when it went down waits it out
            clock, waited = clock + OUTAGE[1] - OUTAGE[0], True
        ends.append(clock)
    return ends


@pytest.mark.parametrize("after", [30, 60, 120, 240])
def test_the_eta_after_an_outage_is_within_half_of_the_time_left(after):
    ends = simulated_ends()
    now = OUTAGE[1] + after
    ended = [e for e in ends if e <= now]
    left = ends[-1] - now  # what the simulated run then really took
    pace = live_pace(started=T0, changes=[], finished=[at(e) for e in ended], remaining=ITEMS - len(ended),
                     now=at(now), outages=[(at(OUTAGE[0]), at(OUTAGE[1]))])
    low, high = pace.eta
    assert 0.5 * left <= low <= high <= 1.5 * left, (pace, left)
    assert pace.per_minute == pytest.approx(60 / SECONDS_PER_ITEM, rel=0.25)


def test_while_the_outage_lasts_the_clock_stands_still():
    ends = [e for e in simulated_ends() if e <= OUTAGE[0]]
    before = live_pace(started=T0, changes=[], finished=[at(e) for e in ends], remaining=ITEMS - len(ends),
                       now=at(OUTAGE[0]), outages=[])
    during = live_pace(started=T0, changes=[], finished=[at(e) for e in ends], remaining=ITEMS - len(ends),
                       now=at(OUTAGE[0] + 600), outages=[(at(OUTAGE[0]), None)])
    assert during.running_seconds == before.running_seconds == OUTAGE[0]
    assert during.eta == before.eta
    assert during.window_words == "over the last 90 s of running"


@pytest.mark.django_db
def test_the_task_page_counts_the_recorded_outage_out():
    """The same through the page's reads: the items' end times and the outage as rows, the clock injected."""
    task = make_task(ITEMS, name="Outage")
    start = timezone.now() - timedelta(hours=2)
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.RUNNING, started_at=start)
    ends = simulated_ends()
    now = OUTAGE[1] + 60
    ended = [e for e in ends if e <= now]
    rows = list(task.items.order_by("row"))
    for item, end in zip(rows, ended, strict=False):
        item.status, item.finished_at = ItemStatus.DONE, start + timedelta(seconds=end)
    Item.objects.bulk_update(rows[:len(ended)], ["status", "finished_at"])
    ApiOutage.objects.create(what=MODEL_API, endpoint="http://model.test|m", started_at=start + timedelta(
        seconds=OUTAGE[0]), ended_at=start + timedelta(seconds=OUTAGE[1]))
    task.refresh_from_db()
    progress = task_progress(task, now=start + timedelta(seconds=now))
    left = ends[-1] - now
    low, high = progress.eta
    assert 0.5 * left <= low <= high <= 1.5 * left, (progress.pace, left)


@pytest.mark.django_db
@pytest.mark.usefixtures("redis_conn")
def test_the_governor_records_when_the_model_api_went_down_and_came_back(redis_conn, settings):
    settings.OPENAI_RPM = settings.OPENAI_TPM = settings.OPENAI_MAX_CONCURRENCY = None
    endpoint = f"http://outage.test/{uuid.uuid4().hex}|model"
    governor = Governor(redis_conn, endpoint, outage_log=OutageLog())
    try:
        with governor.turn(give_up=time.monotonic() + 0.3) as turn:
            turn.unreachable()
        (began, ended), = ApiOutage.objects.filter(endpoint=endpoint).values_list("started_at", "ended_at")
        assert ended is None and model_outages(began) == [(began, None)]
        governor.r.delete(governor._k("backoff_until"))
        with governor.turn(give_up=time.monotonic() + 0.3) as probe:  # a probe finds it down still
            probe.unreachable()
        assert ApiOutage.objects.filter(endpoint=endpoint).count() == 1
        governor.r.delete(governor._k("backoff_until"))
        with governor.turn(give_up=time.monotonic() + 0.3) as probe:
            probe.answered({}, 0)
        outage = ApiOutage.objects.get(endpoint=endpoint)
        assert outage.what == MODEL_API and outage.ended_at is not None and outage.ended_at >= outage.started_at
    finally:
        for key in redis_conn.scan_iter(governor.key + ":*"):
            redis_conn.delete(key)
