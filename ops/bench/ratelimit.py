"""A model API that enforces requests per minute (429 past it): the batch finishes near the limit's own bound,
no item fails, and the governor keeps the 429s rare.

The limit's own bound is the time the calls need at that rate: 3 calls an
item, so n items need 3n / rpm minutes. The workers are told nothing: the
governor learns the limit from the API's `x-ratelimit-*` headers and holds
every worker to it (docs/model-endpoints.md).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ops.bench.workload import task_outcome, wait_task_ended
from ops.samples import ticket_rows
from ticketagent.services.tasks import task_create

if TYPE_CHECKING:
    from ops.bench.runner import Bench


def run(bench: Bench) -> None:
    s = bench.sizes
    n, rpm, threads = s.ratelimit_items, s.ratelimit_rpm, s.ratelimit_threads
    bound = 3 * n / rpm * 60
    bench.log(f"== rate limit: {n} tickets against a model allowing {rpm} requests a minute (429 past it): "
              f"{3 * n} calls, the limit's own bound {bound:.0f} s; 1 worker × {threads} threads")
    server, base_url = bench.procs.start_model_server(s.ratelimit_call_seconds, rpm=rpm)
    env = {"OPENAI_API_KEY": "bench-key", "OPENAI_BASE_URL": base_url, "WORKER_THREADS": str(threads)}
    try:
        procs = bench.procs.start_workers(1, env)
        bench.procs.wait_workers_ready(procs)
        t0 = time.time()
        task = task_create(rows=ticket_rows(n, "RL", bench.rng), name=f"bench rate limit {rpm}/min",
                           allow_auto_close=True, failure_threshold=n + 1)
        end = wait_task_ended(task.pk, n, timeout=bound * 2 + 120)
        bench.procs.stop_workers(procs)
        counts = bench.procs.model_calls(base_url)
    finally:
        bench.procs.stop_other(server)
    outcome = task_outcome(task.pk)
    seconds = end - t0
    refused = counts["rate_limited"] / max(1, counts["completions"])
    failed = outcome.get("failed", 0)
    bench.results.raw["ratelimit"] = {"items": n, "rpm": rpm, "seconds": seconds, "bound_s": bound,
                                      "outcome": outcome, "calls": counts["completions"],
                                      "rate_limited": counts["rate_limited"]}
    bench.log(f"  {seconds:.0f} s = {seconds / bound:.2f}× the bound; items {outcome}; {counts['completions']} "
              f"requests, {counts['rate_limited']} answered 429 ({refused:.2%})")
    done = outcome.get("done", 0) == n
    bench.results.add("28", f"{n} tickets, model API at {rpm} requests/min (429 past it), 1 worker × {threads} threads",
                      f"**{seconds / bound:.2f}×** the limit's bound ({seconds:.0f} s of {bound:.0f} s); "
                      f"{failed} failed; {refused:.2%} of calls answered 429",
                      "≤ 1.1×, 0 failed, ≤ 1% 429", done and seconds <= 1.1 * bound and not failed and refused <= 0.01)
