"""Figure 6: our durable pipeline against the same pipeline on DBOS Transact, 1/2/4 worker processes, interleaved.

Both sides get the same tickets (fresh ones per run), the same offline model
through the same client, the same sandbox helpdesk (honouring keys, no
faults) and the same helpdesk calls with idempotency keys, and as many
worker processes, each running one item at a time. The runs alternate
(ours, the peer's, the peer's, ours, …) so a drift in the machine's speed
hits both; each side's figure is the median of `peer_repeats` runs. Items/s
is tickets ÷ (the last item's end − submit), each side's end from its own
database. The peer's workers are started for each of its runs and stopped
after it (its queue polling would otherwise load the machine while ours
run); ours stay up for a worker count, idle on Redis between runs.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING

from ops.bench.dbos_peer import DbosPeer
from ops.bench.workload import durable_rate
from ops.samples import ticket_rows

if TYPE_CHECKING:
    from ops.bench.runner import Bench

# A floor, not the goal (the goal is the model-speed work): ours at least this share of DBOS's rate.
TARGET = 0.9


def run(bench: Bench) -> None:
    s = bench.sizes
    bench.log(f"== 6 peer: {s.peer_items} tickets per run, ours vs DBOS Transact, workers {s.peer_workers}, "
              f"median of {s.peer_repeats}")
    raw = bench.results.raw.setdefault("peer", {})
    peer = DbosPeer(bench)
    try:
        peer.stop(peer.start(1))  # creates and migrates the peer's database once, outside the timed runs
        peer.forget_runs()
        for w in s.peer_workers:
            raw[w] = _one_count(bench, peer, w)
    finally:
        peer.close()


def _one_count(bench: Bench, peer: DbosPeer, w: int) -> dict:
    s = bench.sizes
    ours_procs = bench.procs.start_workers(w)
    bench.procs.wait_workers_ready(ours_procs)
    rates: dict[str, list[float]] = {"ours": [], "dbos": []}
    notes: list[str] = []
    try:
        for rep in range(s.peer_repeats):
            order = ("ours", "dbos") if rep % 2 == 0 else ("dbos", "ours")
            for side in order:
                rows = ticket_rows(s.peer_items, f"P{w}{side[0].upper()}{rep}", bench.rng)
                if side == "ours":
                    rate, _ = durable_rate(rows, w, notes, label="peer")
                else:
                    rate = _dbos(bench, peer, rows, w, f"p{w}r{rep}-{int(time.time())}", notes)
                rates[side].append(rate)
                bench.log(f"  {w} worker(s), run {rep + 1} {side:4s}: {rate:6.1f} items/s")
    finally:
        bench.procs.stop_workers(ours_procs)
    ours, dbos = statistics.median(rates["ours"]), statistics.median(rates["dbos"])
    ratio = ours / dbos
    bench.results.notes += [f"peer, {w} worker(s): {why} — this figure is not valid" for why in notes]
    bench.results.add("6", f"throughput, {w} worker process{'es' if w > 1 else ''}: ours vs the same pipeline "
                      f"on DBOS Transact (median of {s.peer_repeats})",
                      f"{ours:.1f} vs {dbos:.1f} items/s = **{ratio:.2f}×**" + (" (INVALID, see notes)" if notes
                                                                                   else ""),
                      f"≥ {TARGET}×", ratio >= TARGET and not notes)
    return {"ours": rates["ours"], "dbos": rates["dbos"], "ratio": ratio, "valid": not notes}


def _dbos(bench: Bench, peer: DbosPeer, rows, w: int, tag: str, notes: list[str]) -> float:
    procs = peer.start(w)
    try:
        run = peer.wait(peer.submit(rows, tag), timeout=60 + len(rows) * 2)
    finally:
        peer.stop(procs)
    if run.statuses.get("SUCCESS", 0) != run.n:
        notes.append(f"the peer's workflows ended {run.statuses}")
    return run.items_per_s
