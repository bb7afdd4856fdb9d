"""Crash points around external calls, for tests and the kill test.

`crash_point(name)` does nothing unless a crash is armed for `name`:
  * in-process tests arm it with `arm(name)`, which raises SimulatedCrash
    (a BaseException, so no `except Exception` swallows it);
  * real processes arm it with LEDGER_CRASH_AT="after_intent:0.2,after_call:0.1",
    which SIGKILLs the current process with that probability.
The windows, in order: before_intent, after_intent, after_call, after_commit.
"""

import os
import random
import signal

WINDOWS = ("before_intent", "after_intent", "after_call", "after_commit")


class SimulatedCrash(BaseException):
    """The process 'died' at a crash point (in-process tests only)."""


_armed: dict[str, int] = {}


def arm(name: str, times: int = 1) -> None:
    if name not in WINDOWS:
        raise ValueError(f"unknown crash point {name!r}; choose from {', '.join(WINDOWS)}")
    _armed[name] = times


def disarm() -> None:
    _armed.clear()


def _env_probabilities() -> dict[str, float]:
    raw = os.environ.get("LEDGER_CRASH_AT", "")
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        name, _, prob = part.partition(":")
        out[name] = float(prob or 1.0)
    return out


def crash_point(name: str) -> None:
    if _armed.get(name):
        _armed[name] -= 1
        raise SimulatedCrash(name)
    prob = _env_probabilities().get(name)
    if prob and random.random() < prob:
        marker = os.environ.get("LEDGER_CRASH_LOG")
        if marker:
            with open(marker, "a") as fh:
                fh.write(f"{name}\n")
        os.kill(os.getpid(), signal.SIGKILL)
