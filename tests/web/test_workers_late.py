"""A worker that stops saying it is alive is shown late on the Workers page's next render, with how long it has
been silent, and each worker has one "last seen".

Before: a SIGKILLed worker stayed "busy · 4 of 4 threads" for a whole lease time (rq's hash still said busy), and
its row showed two different times (rq's heartbeat, between jobs, and its own sign of life)."""

import re
import signal
import time

import pytest
from django.urls import reverse

from ticketagent.web.selectors.ops import late_after

from ..factories import make_task

pytestmark = [pytest.mark.django_db(transaction=True)]


def _row(client, pid: int) -> str:
    page = client.get(reverse("workers")).content.decode()
    found = re.search(rf'<tr id="worker-{pid}">(.*?)</tr>', page, re.S)
    return found.group(1) if found else ""


def _cell(row: str, label: str) -> str:
    return re.search(rf'<td data-label="{label}"[^>]*>(.*?)</td>', row, re.S).group(1)


def _wait_for(client, pid: int, text: str, timeout: float = 90) -> str:
    """The worker's row once its State cell says `text` (the row as a whole says "busy" from the start: "0 of 2
    threads busy")."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = _row(client, pid)
        if row and text in _cell(row, "State"):
            return row
        time.sleep(0.3)
    raise AssertionError(f"the worker's row never said {text!r}: {row}")


def test_a_killed_busy_worker_is_late_at_once_with_its_silence_and_one_last_seen(client, alice, workers, sandbox,
                                                                               settings):
    sandbox.set_faults(latency_ms=3000)  # each helpdesk call takes a while: the worker is busy when it is killed
    [worker] = workers.start(1, extra_env={"WORKER_THREADS": "2"})
    make_task(2, name="Busy batch")
    # the page's own lease time: long, so that the killed worker cannot turn "dead" while the test looks
    settings.LEASE_SECONDS = 600
    client.force_login(alice)
    row = _wait_for(client, worker.pid, "busy")
    assert _cell(row, "State").strip() == "busy"
    assert _cell(row, "Last seen").count("<time") == 1 and "<time" not in _cell(row, "State")

    workers.kill(worker, signal.SIGKILL)
    row = _wait_for(client, worker.pid, "worker-late")
    state = _cell(row, "State")
    assert "busy" not in state and "dead" not in state.split("</b>")[0]
    silent = int(re.search(r"no heartbeat for (\d+) s", state).group(1))
    assert silent > late_after()
    assert re.search(r"[12] of 2 threads busy when last seen", _cell(row, "Items in flight"))
    last_seen = _cell(row, "Last seen")
    assert last_seen.count("<time") == 1 and f"({silent} s ago)" in last_seen  # the same silence, said once
    assert "<time" not in state
