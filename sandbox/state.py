"""What the HTTP and SMTP listeners of one sandbox share: its store, its faults, its request statistics.

The statistics (requests, rejections, injected errors, drops, replays) live
in memory: they reset on ``/_sandbox/reset`` and on restart. Deliveries live
in the store.
"""

from __future__ import annotations

import copy
import json
import sys
import threading
import time

from sandbox.endpoints import ENDPOINTS
from sandbox.faults import Faults
from sandbox.store import Store

__all__ = ["SandboxState", "log"]

_log_lock = threading.Lock()


def log(quiet: bool, message: str) -> None:
    """One line on stderr, unless ``quiet``; stdout carries only the ready line."""
    if quiet:
        return
    line = f"[sandbox {time.strftime('%H:%M:%S')}] {message}\n"
    with _log_lock:
        try:
            sys.stderr.write(line)
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def _default_stats() -> dict:
    return {
        "requests": 0,
        "requests_by_endpoint": {name: 0 for name in ENDPOINTS},
        "rejected": 0,
        "errors_injected": 0,
        "drops": 0,
        "stalls": 0,
        "replays": 0,
    }


class SandboxState:
    """Store + faults + in-memory request statistics (shared by HTTP and SMTP)."""

    def __init__(self, db: str | None = None, honor_keys: bool = True, quiet: bool = False):
        self.store = Store(db)
        self.faults = Faults(honor_keys)
        self.quiet = quiet
        self._lock = threading.Lock()
        self._stats = _default_stats()
        self.generation = 0  # a reset begins a new one: a write that began before it is not recorded after it

    def log(self, message: str) -> None:
        log(self.quiet, message)

    # -- faults --------------------------------------------------------------
    def set_faults(self, body) -> dict:
        """Merge ``body`` into the faults (:class:`ValidationError` if invalid)."""
        result = self.faults.merge(body)
        self.log(f"faults set: {json.dumps(body, sort_keys=True)}")
        return result

    def reset(self) -> None:
        """Clear the deliveries, the faults and the request statistics. A write still waiting out its latency
        (sent before the reset, by a test that has ended) is not recorded after it (`outdated`)."""
        with self._lock:
            self.generation += 1
        self.store.reset()
        self.faults.clear()
        with self._lock:
            self._stats = _default_stats()
        self.log("reset: deliveries, faults and stats cleared")

    # -- one write request ---------------------------------------------------
    def begin_request(self, endpoint: str) -> float:
        """Count one write request; returns the latency to apply (seconds)."""
        with self._lock:
            self._stats["requests"] += 1
            by = self._stats["requests_by_endpoint"]
            by[endpoint] = by.get(endpoint, 0) + 1
        return self.faults.latency()

    def outdated(self, generation: int, what: str) -> bool:
        """The sandbox was reset since the write began (`generation`, read before its latency): not recorded."""
        if generation == self.generation:
            return False
        self.log(f"{what}: began before a reset; not recorded")
        return True

    def take_error(self, endpoint: str) -> int | None:
        """Status to answer with if an error fault fires (counted), else ``None``."""
        status = self.faults.take_error(endpoint)
        if status is not None:
            self.note("errors_injected")
        return status

    def take_read(self) -> str | None:
        """What a read fault does to this read ("error", "drop", "stall"; counted), or ``None``."""
        fault = self.faults.take_read()
        if fault is not None:
            self.note({"error": "errors_injected", "drop": "drops", "stall": "stalls"}[fault])
        return fault

    def take_drop(self, endpoint: str) -> bool:
        """Whether a drop fault fires for this write (counted)."""
        if self.faults.take_drop(endpoint):
            self.note("drops")
            return True
        return False

    def note(self, stat: str) -> None:
        with self._lock:
            self._stats[stat] += 1

    def record(self, **kwargs) -> tuple[dict, bool]:
        """Record a delivery, deduped by key unless keys are ignored; ``(delivery, replayed)``."""
        delivery, replayed = self.store.record(honor_keys=self.faults.honor_keys, **kwargs)
        if replayed:
            self.note("replays")
        return delivery, replayed

    # -- reporting -----------------------------------------------------------
    def counts(self) -> dict:
        result = self.store.counts()
        with self._lock:
            stats = copy.deepcopy(self._stats)
        result.update(stats)
        result["honor_keys"] = self.faults.honor_keys
        return result
