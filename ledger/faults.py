"""Crash points around external calls, for tests and the kill test.

`crash_point(name)` does nothing unless a crash is armed for `name`:
  * in-process tests arm it with `arm(name)`, which raises SimulatedCrash
    (a BaseException, so no `except Exception` swallows it);
  * real processes arm it with LEDGER_CRASH_AT="after_intent:0.2,after_call:0.1",
    which SIGKILLs the current process with that probability; a path after `@`
    ("after_intent:0.2,after_call:0.1@/path/crashes.log") is a file each kill's
    window is appended to first (the kill test counts them).
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


def _env_crashes() -> tuple[dict[str, float], str]:
    """LEDGER_CRASH_AT's windows with their probabilities, and its log file ("" without one)."""
    raw = os.environ.get("LEDGER_CRASH_AT", "")
    points, _, log = raw.partition("@")
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in points.split(","))):
        name, _, prob = part.partition(":")
        out[name.strip()] = float(prob or 1.0)
    return out, log.strip()


def crash_point(name: str) -> None:
    if _armed.get(name):
        _armed[name] -= 1
        raise SimulatedCrash(name)
    probabilities, marker = _env_crashes()
    prob = probabilities.get(name)
    if prob and random.random() < prob:
        if marker:
            with open(marker, "a") as fh:
                fh.write(f"{name}\n")
        os.kill(os.getpid(), signal.SIGKILL)
