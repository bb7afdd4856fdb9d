"""Figure 4: server time of the dashboard's pages over the 100k-item dataset."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import connection
from django.test import override_settings

from ledger.models import Effect
from ops.bench.dataset import big_task
from ops.bench.profiling import profile_section
from ops.bench.results import percentile
from ops.bench.workload import operator_client
from ticketagent.health import health_numbers_refresh
from ticketagent.models import Item

if TYPE_CHECKING:
    from ops.bench.runner import Bench


def run(bench: Bench) -> None:
    s = bench.sizes
    big = big_task()
    n_items, n_effects = Item.objects.count(), Effect.objects.count()
    bench.log(f"== 4 dashboard: {n_items} items, {n_effects} effects; {s.dashboard_requests} requests per page")
    client = operator_client()
    pages = {"task list": "/", "task detail": f"/tasks/{big.pk}/", "review queue": "/review/",
             "/metrics": "/metrics"}
    # The whole-database counts (tiles, /metrics) are shared through the
    # cache for HEALTH_CACHE_SECONDS; these two count for every request.
    uncached = {"task list, counts not cached": "/", "/metrics, counts not cached": "/metrics"}
    ttl = settings.HEALTH_CACHE_SECONDS
    times: dict[str, list[float]] = {name: [] for name in [*pages, *uncached]}
    for url in pages.values():  # warm-up: templates, caches
        for _ in range(2):
            response = client.get(url)
            if response.status_code != 200:
                raise RuntimeError(f"GET {url} answered {response.status_code}")
    # as deployed: the recovery sweep (`recover --loop`) counts every HEALTH_CACHE_SECONDS, so viewers
    # read the counts from the cache; here a thread does what the sweep does
    stop = threading.Event()
    counting = threading.Thread(target=_refresher, args=(stop, ttl), daemon=True)
    counting.start()
    with profile_section(bench, "dashboard", "the dashboard pages"):
        for _ in range(s.dashboard_requests):
            for group, cache_seconds in ((pages, ttl), (uncached, 0)):
                with override_settings(HEALTH_CACHE_SECONDS=cache_seconds):
                    for name, url in group.items():
                        t = time.perf_counter()
                        response = client.get(url)
                        if hasattr(response, "streaming_content"):
                            b"".join(response.streaming_content)
                        times[name].append(time.perf_counter() - t)
    stop.set()
    counting.join(timeout=30)
    _record(bench, times, ttl, n_items, n_effects)


def _refresher(stop: threading.Event, ttl: float) -> None:
    try:
        while not stop.is_set():
            health_numbers_refresh(ttl)
            stop.wait(ttl)
    finally:
        connection.close()


def _record(bench: Bench, times: dict[str, list[float]], ttl: float, n_items: int, n_effects: int) -> None:
    raw = bench.results.raw.setdefault("dashboard", {})
    raw["health_cache_seconds"] = ttl
    for name in times:
        p50, p95 = percentile(times[name], 50) * 1000, percentile(times[name], 95) * 1000
        raw[name] = {"p50_ms": p50, "p95_ms": p95}
        bench.log(f"  {name:28s}: p50 {p50:6.1f} ms, p95 {p95:6.1f} ms")
        bench.results.add("4", f"{name} ({n_items // 1000}k items, {n_effects // 1000}k effects)",
                          f"p50 {p50:.0f} ms, p95 **{p95:.0f} ms**", "p95 ≤ 150 ms", p95 <= 150)
