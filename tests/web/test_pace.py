"""A task's pace on recorded timelines: items per minute and the ETA count running time only, come from the recent
rate, and are a range or nothing when they cannot be honest.

The two timelines an operator met: a task that ran 4 s and sat suspended 20 minutes was shown "1.0 items/min
overall" (its suspension counted as work), and a running task was shown "ETA 2 s" with 31 s left (its rate was
two items over the one second since a status event restarted the count)."""

from datetime import UTC, datetime, timedelta

import pytest

from ticketagent.templatetags.ticketagent_extras import eta_range
from ticketagent.web.pace import ended_pace, live_pace, recent_spans, running_spans

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_running_time_leaves_out_suspended_paused_and_waiting_for_a_person():
    changes = [(at(10), "suspended"), (at(100), "running"), (at(130), "paused"), (at(200), "running"),
               (at(210), "needs_review"), (at(400), "running"), (at(450), "completed")]
    assert running_spans(T0, changes, at(450)) == [(T0, at(10)), (at(100), at(130)), (at(200), at(210)),
                                                   (at(400), at(450))]
    # the last 60 s of running time reach back across a pause and a review
    assert recent_spans(running_spans(T0, changes, at(450)), 60) == [(at(200), at(210)), (at(400), at(450))]


def test_a_task_that_ran_4_s_and_sat_suspended_20_minutes_ran_4_s():
    """Was "1.0 items/min overall": 21 items over the 21 minutes from start to end."""
    changes = [(at(4), "suspended"), (at(4 + 1200), "running"), (at(4 + 1200 + 1), "completed")]
    pace = ended_pace(started=T0, changes=changes, ended_items=21)
    assert pace.running_seconds == 5
    assert pace.per_minute == pytest.approx(21 / 5 * 60)
    assert pace.overall and pace.eta is None
    assert pace.window_words == "over its 5 s of running (20 min from start to end)"


def test_the_eta_is_a_range_from_the_recent_running_rate_and_holds_the_31_s_that_were_left():
    """Was "ETA 2 s": 10 items ended one every 6 s; an item requeued from review wrote a status event at 60 s and
    the count restarted there, so two items ending at 60.5 and 61 s made 120 items/min. Five were left: 31 s."""
    finished = [at(6 * k) for k in range(1, 11)] + [at(60.5), at(61)]
    changes = [(at(58), "needs_review"), (at(60), "running")]
    pace = live_pace(started=T0, changes=changes, finished=finished, remaining=5, now=at(61))
    assert pace.per_minute == pytest.approx(12 / 59 * 60)  # 59 s of running time: the 2 s waiting do not count
    low, high = pace.eta
    assert low <= 31 <= high
    assert (low, high) == (19, 35)
    assert eta_range(pace.eta) == "15 s – 35 s"


def test_a_rate_the_recent_running_time_cannot_support_is_not_shown():
    # three items in the first ten seconds: a rate, but no ETA (n - √n would be barely above 1)
    pace = live_pace(started=T0, changes=[], finished=[at(3), at(6), at(9)], remaining=50, now=at(12))
    assert pace.per_minute == pytest.approx(15)
    assert pace.eta is None and eta_range(pace.eta) == "—"
    # a burst right after the start: under MIN_SECONDS_FOR_RATE of running time says nothing yet
    burst = live_pace(started=T0, changes=[], finished=[at(1)] * 8, remaining=50, now=at(2))
    assert burst.per_minute is None and burst.eta is None
    # suspended for an hour after one burst: its clock stood still, the rate is the burst's running time's
    held = live_pace(started=T0, changes=[(at(20), "suspended"), (at(3620), "running")],
                     finished=[at(5 * k) for k in range(1, 5)], remaining=8, now=at(3630))
    assert held.running_seconds == 30
    assert held.per_minute == pytest.approx(4 / 30 * 60)
    assert held.eta == (40, 120)


def test_only_the_last_five_minutes_of_running_count():
    # fast at first (one item a second for 100 s), then slow (one every 10 s for 600 s): the recent rate is the slow one
    finished = [at(k) for k in range(1, 101)] + [at(100 + 10 * k) for k in range(1, 61)]
    pace = live_pace(started=T0, changes=[], finished=finished, remaining=30, now=at(700))
    assert pace.per_minute == pytest.approx(6, rel=0.05)
    low, high = pace.eta
    assert low <= 300 <= high


def test_eta_range_words():
    assert eta_range((19, 35)) == "15 s – 35 s"
    assert eta_range((130, 250)) == "2 min – 5 min"
    assert eta_range((3, 12)) == "under 15 s"
    assert eta_range((61, 62)) == "1 min – 2 min"
    assert eta_range((120, 120)) == "2 min"
    assert eta_range(None) == "—"
