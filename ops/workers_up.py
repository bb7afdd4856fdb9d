"""Whether the workers a launcher started are up: each has written its first sign of life into rq's registry."""

from __future__ import annotations

import time
from collections.abc import Callable

from ops.processes import say

# A worker imports Django, connects, recovers what it finds and registers: seconds on an idle machine, a minute and
# more on a loaded one. Past this `make run`'s banner says how many are up rather than waiting on.
WORKERS_UP_SECONDS = 180


def workers_up(redis_url: str, pids: list[int]) -> int:
    """How many of these worker processes have said they are alive: written their first sign of life (`seen`,
    ticketagent.scheduling.rqworker.SignOfLife) into their registration in rq's registry."""
    import redis
    from rq.worker_registration import REDIS_WORKER_KEYS

    connection = redis.Redis.from_url(redis_url)
    up = 0
    for key in connection.smembers(REDIS_WORKER_KEYS):
        pid, seen = connection.hmget(key, "pid", "seen")
        up += bool(seen and pid and int(pid) in pids)
    return up


def wait_for_workers(redis_url: str, pids: list[int], *, check: Callable[[], None],
                     timeout: float = WORKERS_UP_SECONDS) -> int:
    """Until every worker started has said it is alive (or `timeout`); returns how many have. `check` runs between
    looks (it raises when a child died: that worker's output says why)."""
    if pids:
        say(f"== waiting for the {len(pids)} worker{'s' if len(pids) != 1 else ''}' first heartbeat")
    deadline = time.monotonic() + timeout
    while True:
        check()
        up = workers_up(redis_url, pids) if pids else 0
        if up >= len(pids) or time.monotonic() > deadline:
            return up
        time.sleep(0.3)
