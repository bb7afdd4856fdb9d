"""The kill test's slow-worker faults: a worker paused, its database answers stalled or cut, a gateway that answers 504.

A killed worker never wakes up; a slow one does, believing it still holds
its lease. Each fault outlasts the lease (`seconds`), so the sweep takes
the item over while the slow worker still holds what it read:

    pause        SIGSTOP one worker (work-horse included) at a random moment, SIGCONT after `seconds`
    pause-aimed  SIGSTOP it at the moment it sends the statement that commits an effect's intent
                 (its FaultProxy sees the pattern): the intent commits, the worker hears of it late
    stall        its FaultProxy holds every answer of PostgreSQL for `seconds` (statements still run)
    stall-aimed  the same, from the moment it sends the statement that commits an intent
                 (the aimed faults aim at `once` effects: a draft written twice is no duplicate)
    drop         its database link cut silently (no FIN, no RST) for `seconds`, then healed: the
                 connections cut stay dead, as a lost host's do
    gateway      the helpdesk behind ops/gateway.py: a share of writes answered 504 after 1 s and
                 delivered to the helpdesk 4 s later

One round runs one of these (in turn, `round_fault`), on one worker at a
time, so what a round found is what its fault did.
"""

import signal
import threading
import time
from dataclasses import dataclass

from ops.gateway import Gateway
from ops.killtest.pool import WorkerPool
from ops.killtest.report import Report
from ops.processes import Child

WORKER_FAULTS = ("pause", "pause-aimed", "stall", "stall-aimed", "drop")
SLOW_FAULTS = (*WORKER_FAULTS, "gateway")
# The statement that records the intent of a `once` effect, in the intent's own phase (the class travels
# with it, quoted in the text or as a bound parameter).
INTENT_PATTERN = (b'INSERT INTO "ledger_effect"', b"once")
AIM_PATIENCE = 8.0  # seconds an aimed fault waits for its statement before it is cancelled


@dataclass
class Active:
    """The fault in progress: on which worker, and until when (None: aimed, not yet hit)."""

    kind: str
    child: Child
    until: float | None
    armed_at: float


class SlowFaults:
    """Injects the round's slow-worker fault on one worker at a time and ends it."""

    def __init__(self, pool: WorkerPool, report: Report, *, seconds: float, gateway: Gateway | None = None,
                 gateway_share: float = 0.15):
        self.pool, self.report, self.seconds = pool, report, seconds
        self.gateway, self.gateway_share = gateway, gateway_share
        self.active: Active | None = None
        self.lock = threading.Lock()

    # -- a round -------------------------------------------------------------------
    def round_started(self, kind: str) -> None:
        if self.gateway is not None:
            self.gateway.write_share = self.gateway_share if kind == "gateway" else 0.0

    def calm(self) -> None:
        """The round settles: no new 504s, an aimed fault not yet hit is cancelled."""
        if self.gateway is not None:
            self.gateway.write_share = 0.0
        with self.lock:
            active = self.active
        if active is not None and active.until is None:
            proxy = self.pool.proxies.get(active.child)
            if proxy is not None:
                proxy.cancel_aims()
            with self.lock:
                hit = active.until is not None
            if not hit:
                self._end(active)

    def busy(self) -> bool:
        return self.active is not None

    def inject(self, kind: str) -> None:
        """Start `kind` on a random live worker (a worker fault; the gateway is set per round)."""
        if kind not in WORKER_FAULTS or self.active is not None:
            return
        live = [c for c in self.pool.workers if c.poll() is None and c in self.pool.proxies]
        if not live:
            return
        child = self.pool.rng.choice(live)
        proxy = self.pool.proxies[child]
        now = time.monotonic()
        active = Active(kind, child, now + self.seconds, now)
        self.pool.spared.add(child)
        if kind == "pause":
            child.signal(signal.SIGSTOP)
        elif kind == "stall":
            proxy.stall(self.seconds)
        elif kind == "drop":
            proxy.drop()
        else:
            active.until = None
            hit = self._hit_pause if kind == "pause-aimed" else self._hit_stall
            proxy.stall_next(INTENT_PATTERN, 0 if kind == "pause-aimed" else self.seconds,
                             on_match=lambda: hit(active))
        self.active = active
        self.report.faults[kind if active.until is not None else f"{kind} (armed)"] += 1

    def _hit_pause(self, active: Active) -> None:
        """In the proxy's thread, before the statement goes on: stop the worker that sent it."""
        active.child.signal(signal.SIGSTOP)
        self._hit(active)

    def _hit_stall(self, active: Active) -> None:
        """Hold every answer to this worker (its heartbeat's too), so its lease runs out."""
        self.pool.proxies[active.child].stall(self.seconds)
        self._hit(active)

    def _hit(self, active: Active) -> None:
        with self.lock:
            active.until = time.monotonic() + self.seconds
        self.report.faults[active.kind] += 1

    # -- ending ----------------------------------------------------------------------
    def tick(self) -> None:
        """End the fault in progress when its time is up (an aimed one not hit within AIM_PATIENCE: cancelled)."""
        with self.lock:
            active = self.active
            if active is None:
                return
            now = time.monotonic()
            due = active.until is not None and now >= active.until
            missed = active.until is None and now - active.armed_at >= AIM_PATIENCE
        if missed:
            proxy = self.pool.proxies.get(active.child)
            if proxy is not None:
                proxy.cancel_aims()
            with self.lock:
                if active.until is not None:  # hit meanwhile: it runs its time
                    return
        if due or missed:
            self._end(active)

    def _end(self, active: Active) -> None:
        if active.kind.startswith("pause"):
            active.child.signal(signal.SIGCONT)
        elif active.kind == "drop":
            proxy = self.pool.proxies.get(active.child)
            if proxy is not None:
                proxy.heal()
        self.pool.spared.discard(active.child)
        with self.lock:
            if self.active is active:
                self.active = None

    def finish(self) -> None:
        """End whatever is in progress (the run is over)."""
        self.calm()
        with self.lock:
            active = self.active
        if active is not None:
            self._end(active)
