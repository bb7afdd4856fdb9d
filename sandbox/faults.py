"""Fault injection: the latency, errors and dropped connections a test asks the sandbox for.

The faults are set through ``POST /_sandbox/faults`` (merged per endpoint),
and each write request asks them, in order: how long to wait, whether to
answer with an error instead, and -- once the delivery is recorded -- whether
to drop the connection rather than answer. A read (a look-up) asks the
``read_*`` faults: answer with an error, drop the connection, or stall
(answer nothing until the client gives up). ``honor_keys`` lives here too, so
a test can switch dedupe off for a running sandbox.
"""

from __future__ import annotations

import copy
import random
import socket
import struct
import threading

from sandbox.endpoints import ANY_ENDPOINT, ENDPOINTS
from sandbox.validation import ValidationError

__all__ = ["Faults", "reset_on_close"]


def _defaults(honor_keys: bool) -> dict:
    return {
        "latency_ms": 0,
        "error_rate": {},
        "error_status": 503,
        "drop_rate": {},
        "error_next": {},
        "drop_next": {},
        "honor_keys": honor_keys,
        "seed": None,
        "read_error_next": 0,
        "read_drop_next": 0,
        "read_stall_next": 0,
        "read_error_rate": 0,
    }


#: What a read fault does, by the counter that asks for it (checked in this order).
READ_FAULTS = (("read_error_next", "error"), ("read_drop_next", "drop"), ("read_stall_next", "stall"))


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_rate(v) -> bool:
    return _is_num(v) and 0 <= v <= 1


def _is_count(v) -> bool:
    return _is_int(v) and v >= 0


#: The per-endpoint maps: name -> (value check, what the error message asks for).
_MAPS = {
    "error_rate": (_is_rate, "a number 0..1"),
    "drop_rate": (_is_rate, "a number 0..1"),
    "error_next": (_is_count, "an integer >= 0"),
    "drop_next": (_is_count, "an integer >= 0"),
}


def _endpoint_map(name: str, value) -> dict:
    check, what = _MAPS[name]
    if not isinstance(value, dict):
        raise ValidationError(f"{name} must be an object {{endpoint: {what}}}")
    for ep, v in value.items():
        if ep not in ENDPOINTS and ep != ANY_ENDPOINT:
            raise ValidationError(f"{name}: unknown endpoint {ep!r} (use one of {', '.join(ENDPOINTS)} or '*')")
        if not check(v):
            raise ValidationError(f"{name}[{ep!r}] must be {what}")
    return value


def _scalar_updates(body: dict) -> dict:
    updates = {}
    if "latency_ms" in body:
        v = body["latency_ms"]
        if not _is_int(v) or not 0 <= v <= 600_000:
            raise ValidationError("latency_ms must be an integer 0..600000")
        updates["latency_ms"] = v
    if "error_status" in body:
        v = body["error_status"]
        if not _is_int(v) or not 400 <= v <= 599:
            raise ValidationError("error_status must be an integer 400..599")
        updates["error_status"] = v
    if "honor_keys" in body:
        if not isinstance(body["honor_keys"], bool):
            raise ValidationError("honor_keys must be a boolean")
        updates["honor_keys"] = body["honor_keys"]
    if "seed" in body:
        v = body["seed"]
        if v is not None and not _is_int(v):
            raise ValidationError("seed must be an integer or null")
        updates["seed"] = v
    for name, _ in READ_FAULTS:
        if name in body:
            if not _is_count(body[name]):
                raise ValidationError(f"{name} must be an integer >= 0")
            updates[name] = body[name]
    if "read_error_rate" in body:
        if not _is_rate(body["read_error_rate"]):
            raise ValidationError("read_error_rate must be a number 0..1")
        updates["read_error_rate"] = body["read_error_rate"]
    return updates


def _validate(body) -> tuple[dict, dict]:
    """``(scalar updates, per-endpoint map updates)``, or :class:`ValidationError`."""
    if not isinstance(body, dict):
        raise ValidationError("faults body must be a JSON object")
    unknown = sorted(set(body) - set(_defaults(True)))
    if unknown:
        raise ValidationError(f"unknown fault(s): {', '.join(unknown)}")
    maps = {name: _endpoint_map(name, body[name]) for name in _MAPS if name in body}
    return _scalar_updates(body), maps


class Faults:
    """The current faults and the per-request decisions they make (thread-safe)."""

    def __init__(self, honor_keys: bool = True):
        self.default_honor_keys = bool(honor_keys)
        self._lock = threading.Lock()
        self._faults = _defaults(self.default_honor_keys)
        self._rng = random.Random()

    def snapshot(self) -> dict:
        with self._lock:
            return copy.deepcopy(self._faults)

    @property
    def honor_keys(self) -> bool:
        with self._lock:
            return self._faults["honor_keys"]

    def merge(self, body) -> dict:
        """Validate then merge ``body`` into the current faults (atomically).

        A value of 0 removes that endpoint's entry from a per-endpoint map.
        Returns the faults after the merge.
        """
        updates, maps = _validate(body)
        with self._lock:
            self._faults.update(updates)
            for name, value in maps.items():
                current = self._faults[name]
                for ep, v in value.items():
                    if v:
                        current[ep] = v
                    else:
                        current.pop(ep, None)
            if updates.get("seed") is not None:
                self._rng.seed(updates["seed"])
            return copy.deepcopy(self._faults)

    def clear(self) -> dict:
        """Back to no faults and the startup ``honor_keys``; returns the faults."""
        with self._lock:
            self._faults = _defaults(self.default_honor_keys)
            self._rng = random.Random()
            return copy.deepcopy(self._faults)

    def latency(self) -> float:
        """Seconds to wait before handling a write."""
        with self._lock:
            return self._faults["latency_ms"] / 1000.0

    def take_error(self, endpoint: str) -> int | None:
        """Status to answer with if an error fault fires, else ``None``."""
        with self._lock:
            if self._take("error_next", "error_rate", endpoint):
                return self._faults["error_status"]
        return None

    def take_read(self) -> str | None:
        """What a read (a look-up) gets instead of its answer: "error", "drop", "stall", or ``None``."""
        with self._lock:
            for name, fault in READ_FAULTS:
                if self._faults[name] > 0:
                    self._faults[name] -= 1
                    return fault
            rate = self._faults["read_error_rate"]
            return "error" if rate and self._rng.random() < rate else None

    def take_drop(self, endpoint: str) -> bool:
        """Whether to drop the connection instead of answering this write."""
        with self._lock:
            return self._take("drop_next", "drop_rate", endpoint)

    def _take(self, next_name: str, rate_name: str, endpoint: str) -> bool:
        # caller holds self._lock; a specific endpoint is checked before "*"
        pending = self._faults[next_name]
        for ep in (endpoint, ANY_ENDPOINT):
            n = pending.get(ep, 0)
            if n > 0:
                if n == 1:
                    del pending[ep]
                else:
                    pending[ep] = n - 1
                return True
        rates = self._faults[rate_name]
        rate = rates.get(endpoint, rates.get(ANY_ENDPOINT, 0))
        return bool(rate) and self._rng.random() < rate


def reset_on_close(sock) -> None:
    """Make closing ``sock`` send an RST and no answer: ``SO_LINGER(1, 0)``.

    This is what a dropped connection looks like to the client: the write has
    taken effect, but the answer never comes.
    """
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
