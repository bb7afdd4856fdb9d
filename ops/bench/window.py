"""Figure 12: the window that remains -- from a call's last lease check to its request's bytes leaving.

A worker calls out only while its lease is known valid for the whole call,
and the HTTP client asks the deadline once more right before the request is
written to the socket (`CallDeadline.room_to_send`). A pause after that
check (a SIGSTOP, a VM stall, a long GC) lets the request leave later than
the lease allows; on a channel that honours idempotency keys that is
harmless, on one that ignores them it is the one window left. This figure
times it on real calls to the sandbox helpdesk: from the end of the last
check to the end of the first `send()` of the request, per call, with the
worker's heartbeat thread running beside it (as in a worker).
"""

from __future__ import annotations

import http.client
import threading
import time
from typing import TYPE_CHECKING

from ledger.actions import action_spec
from ledger.channels import base
from ops.bench.results import percentile
from ticketagent.channels.rest import RestHelpdeskChannel

if TYPE_CHECKING:
    from ops.bench.runner import Bench


def measure(url: str, calls: int, *, busy_threads: int = 1) -> list[float]:
    """Seconds from the last deadline check to the request's first send, for `calls` real calls."""
    local = threading.local()
    windows: list[float] = []
    room_to_send, send = base.CallDeadline.room_to_send, http.client.HTTPConnection.send

    def checked(self, wait, what="the request"):
        room_to_send(self, wait, what)
        local.checked = time.perf_counter()

    def sent(self, data):
        send(self, data)
        if getattr(local, "checked", None) is not None:
            windows.append(time.perf_counter() - local.checked)
            local.checked = None

    stop = threading.Event()

    def busy():  # the heartbeat's share of the interpreter: a thread that wakes often
        while not stop.wait(0.001):
            sum(range(200))

    helpers = [threading.Thread(target=busy, daemon=True) for _ in range(busy_threads)]
    for thread in helpers:
        thread.start()
    base.CallDeadline.room_to_send, http.client.HTTPConnection.send = checked, sent
    try:
        channel = RestHelpdeskChannel(base_url=url)
        spec = action_spec("save_draft")
        for n in range(calls):
            channel.perform(spec, {"ticket": f"W-{n}", "body": {"body": "window"}}, f"window-{n:06d}",
                            base.CallDeadline.within(30))
    finally:
        base.CallDeadline.room_to_send, http.client.HTTPConnection.send = room_to_send, send
        stop.set()
    return windows


def run(bench: Bench) -> None:
    calls = {"full": 10000, "tiny": 200}.get(bench.sizes.name, 2000)
    bench.log(f"== 12 the remaining window: {calls} calls to the sandbox, last lease check -> bytes leave")
    url, _ = bench.procs.start_sandbox(name="sandbox-window")
    windows = measure(url, calls)
    bench.results.raw["window"] = {"calls": len(windows), "p50_us": percentile(windows, 50) * 1e6,
                                   "p99_us": percentile(windows, 99) * 1e6, "max_us": max(windows) * 1e6}
    raw = bench.results.raw["window"]
    bench.results.add("12", f"Last lease check → request leaves ({len(windows)} calls)",
                      f"p50 {raw['p50_us']:.0f} µs, p99 {raw['p99_us']:.0f} µs, max {raw['max_us']:.0f} µs",
                      "measured (docs/reliability.md)", True)
