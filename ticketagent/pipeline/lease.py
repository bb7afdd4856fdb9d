"""The lease: which worker may write an item, and the fence every phase checks.

An item is only written by the worker holding its lease (`lease_token`);
every phase locks the item row and checks that token, so a worker whose
lease was taken over cannot write anything. One heartbeat thread per process
(`HEARTBEATS`) extends the leases of all the items it runs.
"""

import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import DateTimeField, ExpressionWrapper, Value
from django.db.models.functions import Now

from ledger.models import Effect
from ledger.services import effects_mark_unknown
from ticketagent.eventlog.append import event_append
from ticketagent.models import EventType, Item, ItemStatus

log = logging.getLogger(__name__)


class LeaseLost(Exception):
    """This worker no longer holds the item: stop without writing."""


class LeaseInDoubt(LeaseLost):
    """The lease may still be ours but is not known valid for the next call: hand the item back."""


_WORKER_NAME: list[str] = []


def worker_name() -> str:
    """host:pid:random -- containers and cloned VMs may share a host name and a pid."""
    if not _WORKER_NAME or not _WORKER_NAME[0].startswith(f"{socket.gethostname()}:{os.getpid()}:"):
        _WORKER_NAME[:] = [f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"]
    return _WORKER_NAME[0]


def lease_renewed():
    """The new deadline of a lease taken or renewed now, on PostgreSQL's clock."""
    return ExpressionWrapper(Now() + Value(timedelta(seconds=settings.LEASE_SECONDS)), output_field=DateTimeField())


class Lease:
    """What this worker knows of its lease, by its own monotonic clock.

    `confirmed_at` is when the last statement that took or renewed the lease
    was *sent* (not when its answer came): the database wrote a deadline at
    least LEASE_SECONDS after that, so the lease is valid until
    `confirmed_at + LEASE_SECONDS` whatever happened since -- a pause, a
    stalled answer. `in_doubt` is set by a heartbeat round that failed
    (`doubt()`): no call is made on the strength of an older confirmation;
    a renewal sent after it (the next round's, or the worker's own before
    its call) clears it (`confirmed()`)."""

    def __init__(self, item_id: int, token: str, confirmed_at: float):
        self.item_id, self.token = item_id, token
        self.confirmed_at = confirmed_at
        self.in_doubt = ""
        self.doubted_at = 0.0  # when (monotonic) the doubt was raised
        self.lost = False
        self._lock = threading.Lock()

    def valid_until(self) -> float:
        return self.confirmed_at + settings.LEASE_SECONDS

    def doubt(self, why: str) -> None:
        """A heartbeat round failed: whether it renewed the lease is not known."""
        with self._lock:
            self.in_doubt, self.doubted_at = why, time.monotonic()

    def confirmed(self, sent: float) -> None:
        """A statement sent at `sent` (monotonic) renewed the lease: it is valid until `sent + LEASE_SECONDS`,
        and a doubt raised before it was sent is cleared."""
        with self._lock:
            self.confirmed_at = max(self.confirmed_at, sent)
            if self.in_doubt and sent > self.doubted_at:
                self.in_doubt = ""

    def renew(self) -> bool:
        """One statement: extend the lease if it is still ours. True when it was."""
        sent = time.monotonic()
        n = (Item.objects.filter(pk=self.item_id, lease_token=self.token, status=ItemStatus.RUNNING)
             .update(lease_expires_at=lease_renewed()))
        if not n:
            self.lost = True
            return False
        self.confirmed(sent)
        return True

    def ensure(self, call_seconds: float) -> float:
        """Before a call of up to `call_seconds`: the time (monotonic) by which
        it must be over, the lease known valid until then -- renewed first
        (one round trip) when the last confirmation is too old or a heartbeat
        failed since. Raises `LeaseLost` when the lease is gone, `LeaseInDoubt`
        when the renewal's answer came back too late for the call."""
        margin = settings.LEASE_MARGIN_SECONDS
        if self.lost:
            raise LeaseLost(f"item {self.item_id}: lease {self.token[:8]} was taken over")
        if self.in_doubt or time.monotonic() + call_seconds + margin > self.valid_until():
            if not self.renew():
                raise LeaseLost(f"item {self.item_id}: lease {self.token[:8]} was taken over")
            if self.in_doubt:  # another round failed after the renewal was sent
                raise LeaseInDoubt(f"item {self.item_id}: {self.in_doubt}")
            if time.monotonic() + call_seconds + margin > self.valid_until():
                raise LeaseInDoubt(f"item {self.item_id}: the lease's renewal answered too late for a "
                                   f"{call_seconds:.1f} s call")
        return self.valid_until() - margin


class Heartbeats:
    """One thread per process renews every lease the process holds, in one transaction a round.

    A worker running many items at once (WORKER_THREADS) would otherwise
    keep a thread and a database connection per item only to renew its
    lease. Every HEARTBEAT_SECONDS the leases registered here are extended
    together -- those still ours: the item still running under that token
    -- and each learns its answer: renewed since the statement was sent
    (`confirmed_at`, clearing a doubt raised before), lost, or in doubt when
    the round failed (the item's worker then confirms its lease before its
    next call, and hands the item back if it cannot). A stalled database
    stalls the round: no lease is confirmed meanwhile, so each one's own
    deadline (`Lease.ensure()`) stops the calls in time."""

    def __init__(self):
        self._leases: dict[int, Lease] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, lease: Lease) -> None:
        with self._lock:
            self._leases[id(lease)] = lease
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="lease-heartbeats", daemon=True)
                self._thread.start()

    def discard(self, lease: Lease) -> None:
        with self._lock:
            self._leases.pop(id(lease), None)

    def _run(self) -> None:
        while True:
            time.sleep(settings.HEARTBEAT_SECONDS)
            with self._lock:
                leases = [lease for lease in self._leases.values() if not lease.lost]
            if not leases:
                connection.close()  # an idle process holds no connection for its heartbeats (none if never opened)
                continue
            try:
                leases_renew(leases)
            except Exception as exc:  # noqa: BLE001 - each worker hands its item back before its next call
                for lease in leases:
                    lease.doubt(f"a heartbeat failed ({type(exc).__name__})")
                log.warning("lease heartbeat for %d item(s) failed: each is confirmed before its next call",
                            len(leases), exc_info=True)
                close_old_connections()
                connection.close()


def leases_renew(leases: list[Lease]) -> None:
    """One transaction: lock the items whose leases are still ours -- skipping those locked now (an item's own
    phase, or a take-over, is writing it: the round does not wait for it, nor for a cut-off session holding
    it) -- and extend those leases. A lease that was skipped is renewed at a later round; one that is no
    longer ours (read as committed) is lost."""
    sent = time.monotonic()
    tokens = [lease.token for lease in leases]
    with transaction.atomic():
        renewed = dict(Item.objects.select_for_update(no_key=True, skip_locked=True)
                       .filter(pk__in=[lease.item_id for lease in leases], lease_token__in=tokens,
                               status=ItemStatus.RUNNING).values_list("lease_token", "pk"))
        Item.objects.filter(pk__in=renewed.values()).update(lease_expires_at=lease_renewed())
    skipped = [token for token in tokens if token not in renewed]
    held = set(Item.objects.filter(lease_token__in=skipped, status=ItemStatus.RUNNING)
               .values_list("lease_token", flat=True)) if skipped else set()
    for lease in leases:
        if lease.token in renewed:
            lease.confirmed(sent)
        elif lease.token not in held:
            lease.lost = True


HEARTBEATS = Heartbeats()


def item_take_over(item: Item, *, actor: str, why: str) -> list[Effect]:
    """Inside a transaction holding the item lock: fence the old lease holder and
    turn its intents into unknowns, settled once it cannot be calling any more
    (its lease deadline: the last moment it could believe its lease valid)."""
    old, ended = item.lease_owner, item.lease_expires_at
    item.lease_clear()
    unknown = effects_mark_unknown(owner_item=item.ref, actor=actor, claim_ended_at=ended,
                                   note=f"{why}; the worker {old or '?'} held it: outcome cannot be known")
    event_append(task_id=item.task_id, item_id=item.pk, type=EventType.RECOVERED, actor=actor, payload={
        "previous_owner": old, "why": why, "unknown_effects": [e.pk for e in unknown],
    })
    return unknown


@dataclass
class ItemRun:
    """What a run of one leased item is: the item, this worker's lease (its token), and the checkpoint as the
    database holds it (`cursor`, `outputs`: only the lease holder writes them, and they move on once the phase
    that wrote them has committed). What a phase locked or found is its own answer (`phases.phase`)."""

    item: Item
    token: str
    lease: Lease
    cursor: int
    outputs: dict
