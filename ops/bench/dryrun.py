"""Figure 5 (dry-run): how long the dry-run of the dataset's 10k-item task takes."""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING

from ops.bench.dataset import big_task
from ops.bench.profiling import profile_section
from ticketagent.models import Item
from ticketagent.services.resume import task_dry_run

if TYPE_CHECKING:
    from ops.bench.runner import Bench


def run(bench: Bench) -> None:
    big = big_task()
    n = Item.objects.filter(task=big).count()
    bench.log(f"== 5 dry-run of a {n}-item task, {bench.sizes.dryrun_repeats} times")
    task_dry_run(task_id=big.pk)  # warm-up
    times = []
    with profile_section(bench, "dryrun", "the dry-run"):
        for _ in range(bench.sizes.dryrun_repeats):
            t = time.perf_counter()
            plan = task_dry_run(task_id=big.pk)
            times.append(time.perf_counter() - t)
    med, worst = statistics.median(times), max(times)
    bench.results.raw["dryrun"] = {"items": n, "median_s": med, "max_s": worst, "totals": plan.totals}
    bench.log(f"  median {med * 1000:.0f} ms, max {worst * 1000:.0f} ms; {plan.totals}")
    bench.results.add("5", f"dry-run of a {n // 1000 or n}{'k' if n >= 1000 else ''}-item task",
                      f"median {med:.2f} s, max **{worst:.2f} s**", "≤ 0.5 s", worst <= 0.5)
