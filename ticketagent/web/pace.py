"""A task's pace: items per minute and an ETA, from its running time only.

A task's clock runs only while it could run: queued or running, and the
model API not down. Time it spends suspended, paused, waiting for a person
(`needs_review`), waiting for the model API (an outage, `ApiOutage`) or
ended does not count: a task that ran 4 s and sat suspended 20 minutes ran
4 s, and a 20-minute outage neither slows its rate nor lengthens its ETA. The rate is
the recent one -- the items that ended in the last `RATE_WINDOW_SECONDS` of
running time -- and the ETA is a range, from that rate's uncertainty
(n items seen: n ± √n), or nothing when too few items have ended to say.

Pure functions over a recorded timeline (the task's status changes and its
items' end times), so the numbers can be checked on timelines that happened.
"""

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

RUNNING = frozenset({"queued", "running"})
RATE_WINDOW_SECONDS = 300
MIN_ITEMS_FOR_ETA = 4  # below this the range is wider than it is useful (n - √n ≤ 2)
MIN_SECONDS_FOR_RATE = 10.0  # a rate from a moment's burst of ends says nothing of the next minutes


@dataclass(frozen=True)
class Pace:
    per_minute: float | None  # running: the recent rate; ended: the whole run's, over its running time
    eta: tuple[int, int] | None  # seconds left, (soonest, latest), while it runs
    overall: bool = False  # per_minute is the whole run's average
    running_seconds: float = 0.0  # the task's running time so far
    window_seconds: float = 0.0  # the running time the rate is counted over
    wall_seconds: float = 0.0  # from its start to its end (or now), on the clock

    @property
    def window_words(self) -> str:
        """Over what the rate is counted, in words: "over the last 5 min of running" while it runs, "over its
        6 s of running (6 min from start to end)" once ended -- so a rate never seems to contradict the clock."""
        if not self.overall:
            return f"over the last {_short(self.window_seconds)} of running"
        words = f"over its {_short(self.running_seconds)} of running"
        if self.wall_seconds - self.running_seconds >= 1:
            words += f" ({_short(self.wall_seconds)} from start to end)"
        return words


def _short(seconds: float) -> str:
    """45 s, 4 min, 2 h 5 min: the window's length, to the unit that matters."""
    seconds = int(round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min" if minutes % 60 else f"{minutes // 60} h"


def running_spans(started: datetime, changes: list[tuple[datetime, str]], until: datetime,
                  outages: list[tuple[datetime, datetime | None]] = ()) -> list[tuple[datetime, datetime]]:
    """The task's running intervals, from when it started to `until`, given its status changes in time order,
    less the model API's outages (`(since, until)`; an outage not over yet has None)."""
    spans, running, since = [], True, started
    for at, status in changes:
        if at < started:
            continue
        now_running = status in RUNNING
        if running and not now_running:
            spans.append((since, min(at, until)))
        elif now_running and not running:
            since = at
        running = now_running
    if running and since < until:
        spans.append((since, until))
    return _less([(a, b) for a, b in spans if b > a], outages, until)


def _less(spans, gaps, until: datetime) -> list[tuple[datetime, datetime]]:
    """`spans` without the time in `gaps` (a gap still open lasts to `until`)."""
    for g0, g1 in gaps:
        g1 = until if g1 is None else g1
        cut = []
        for a, b in spans:
            if g1 <= a or g0 >= b:
                cut.append((a, b))
                continue
            if a < g0:
                cut.append((a, g0))
            if g1 < b:
                cut.append((g1, b))
        spans = cut
    return spans


def _seconds(spans) -> float:
    return sum((b - a).total_seconds() for a, b in spans)


def recent_spans(spans, window: float = RATE_WINDOW_SECONDS) -> list[tuple[datetime, datetime]]:
    """The last `window` seconds of running time (possibly across several spans)."""
    out, left = [], window
    for a, b in reversed(spans):
        if left <= 0:
            break
        length = (b - a).total_seconds()
        out.append((max(a, b - timedelta(seconds=left)), b))
        left -= length
    return out[::-1]


def ended_pace(*, started: datetime | None, changes: list[tuple[datetime, str]], ended_items: int,
               finished: datetime | None = None, outages=()) -> Pace:
    """An ended task's average: its ended items over its running time (its clock stopped at its last change,
    or when it finished), counted as at least a second."""
    changes = sorted(changes, key=lambda c: c[0])
    until = changes[-1][0] if changes else finished
    if started is None or until is None:
        return Pace(None, None, overall=True)
    running = _seconds(running_spans(started, changes, until, outages))
    per_minute = ended_items / max(running, 1.0) * 60 if ended_items else None
    return Pace(per_minute, None, overall=True, running_seconds=running, window_seconds=running,
                wall_seconds=max((until - started).total_seconds(), 0.0))


def live_pace(*, started: datetime | None, changes: list[tuple[datetime, str]], finished: list[datetime],
              remaining: int, now: datetime, window: float = RATE_WINDOW_SECONDS, outages=()) -> Pace:
    """A task still under way: the items that ended in its last `window` seconds of running time (`finished`:
    its items' end times), and how long the `remaining` items (not those waiting for a person) may take."""
    if started is None:
        return Pace(None, None)
    spans = running_spans(started, sorted(changes, key=lambda c: c[0]), now, outages)
    running = _seconds(spans)
    recent = recent_spans(spans, window)
    seconds = _seconds(recent)
    n = sum(1 for f in finished if any(a <= f <= b for a, b in recent))
    wall = (now - started).total_seconds()
    if n == 0 or seconds < MIN_SECONDS_FOR_RATE:
        return Pace(None, None, running_seconds=running, window_seconds=seconds, wall_seconds=wall)
    eta = None
    if remaining > 0 and n >= MIN_ITEMS_FOR_ETA:
        spread = math.sqrt(n)
        eta = (int(remaining * seconds / (n + spread)), math.ceil(remaining * seconds / (n - spread)))
    return Pace(n / seconds * 60, eta, running_seconds=running, window_seconds=seconds, wall_seconds=wall)
