"""Figure 8: big uploads through the upload page: seconds, the web process's RSS growth, Redis round trips.

Each size runs in a fresh web process of its own (ops/bench/upload_web.py,
started through ops.processes), which POSTs a CSV of that many tickets to
`/upload/` with Django's test client and reports what it measured. No
worker runs meanwhile; the task and its jobs are deleted afterwards.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from ticketagent.models import Task

if TYPE_CHECKING:
    from ops.bench.runner import Bench

TARGET_SECONDS = {10_000: 3.0, 50_000: 15.0}
TARGET_RSS_MB = 100


def run(bench: Bench) -> None:
    sizes = bench.sizes.upload_sizes
    bench.log(f"== 8 upload: {', '.join(f'{n:,}' for n in sizes)} tickets through the upload page, "
              "a fresh web process each")
    raw = bench.results.raw.setdefault("upload", {})
    for n in sizes:
        child = bench.procs.procs.start("upload-web", [sys.executable, "-m", "ops.bench.upload_web", "--rows", str(n),
                                                       "--tag", f"U{n}"])
        try:
            line = child.wait_line(lambda text: text.startswith("{") and '"seconds"' in text, timeout=120 + n / 50)
        finally:
            bench.procs.stop_other(child)
        got = json.loads(line)
        raw[n] = got
        Task.objects.filter(name=f"bench upload {n}").delete()
        bench.flush_redis()
        _record(bench, n, got)


def _record(bench: Bench, n: int, got: dict) -> None:
    ok = got["status"] in (302, 303) or bool(got["location"])
    growth = (got["rss_peak"] - got["rss_before"]) / 2**20
    seconds = got["seconds"]
    target = TARGET_SECONDS.get(n, 3.0 * n / 10_000)
    bench.log(f"  {n:,} tickets ({got['bytes'] / 2**20:.1f} MB): {seconds:.2f} s, answered {got['status']}, "
              f"RSS +{growth:.0f} MB, Redis {got['redis_round_trips']} round trips / {got['redis_commands']} commands "
              f"(server-wide: {got['server_commands']})")
    invalid = "" if ok else f" (INVALID: the page answered {got['status']})"
    bench.results.add("8", f"upload of {n:,} tickets through the upload page ({got['bytes'] / 2**20:.1f} MB CSV)",
                      f"**{seconds:.2f} s**{invalid}", f"≤ {target:g} s", ok and seconds <= target)
    bench.results.add("8", f"web process RSS growth during the {n:,}-ticket upload",
                      f"**{growth:.0f} MB** (from {got['rss_before'] / 2**20:.0f} MB)", f"≤ {TARGET_RSS_MB} MB",
                      ok and growth <= TARGET_RSS_MB)
    bench.results.add("8", f"Redis round trips of the {n:,}-ticket upload (client side)",
                      f"{got['redis_round_trips']:,} round trips, {got['redis_commands']:,} commands "
                      f"({got['redis_round_trips'] / n:.2f} per ticket)")
