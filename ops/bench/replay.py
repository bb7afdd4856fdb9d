"""Figure 5 (replay): events per second when the dataset's big task is replayed from its log."""

from __future__ import annotations

import statistics
import time
from itertools import islice
from typing import TYPE_CHECKING

from ops.bench.dataset import big_task
from ops.bench.profiling import profile_section
from ticketagent.eventlog.replay import replay, task_events
from ticketagent.models import Blob

if TYPE_CHECKING:
    from ops.bench.runner import Bench


def run(bench: Bench) -> None:
    big = big_task()
    limit = bench.sizes.replay_events
    bench.log(f"== 5 replay of {limit} events of task {big.pk} ({bench.sizes.replay_repeats} times)")
    times, count = [], 0
    with profile_section(bench, "replay", "the replay"):
        for _ in range(bench.sizes.replay_repeats):
            counted = []

            def counting(events, counted=counted):
                for e in events:
                    counted.append(1)
                    yield e

            t = time.perf_counter()
            replay(counting(islice(task_events(big.pk), limit)))
            times.append(time.perf_counter() - t)
            count = len(counted)
    # the same events, already in memory: replay's own cost without the reads
    events = list(islice(task_events(big.pk), limit))
    blobs = {b.pk: b.content for b in Blob.objects.all()}
    t = time.perf_counter()
    replay(events, blob=blobs.__getitem__)
    mem = time.perf_counter() - t
    rate = count / statistics.median(times)
    bench.results.raw["replay"] = {"events": count, "median_s": statistics.median(times),
                                   "events_per_s": rate, "in_memory_events_per_s": count / mem}
    bench.log(f"  {count} events: {rate:,.0f} events/s read from the database (blobs fetched per 5,000 events); "
              f"{count / mem:,.0f} events/s in memory")
    bench.results.add("5", f"replay of {count // 1000}k events (read from the database, as `manage.py replay`)",
                      f"**{rate / 1000:.0f}k events/s** (in memory: {count / mem / 1000:.0f}k/s)",
                      "≥ 50k events/s", rate >= 50_000)
