"""This process is stopping: a worker's first SIGTERM or Ctrl-C.

A warm stop finishes what the worker holds, and an item's model calls can
take longer than any supervisor's grace (`make run` gives 10 s, systemd
`TimeoutStopSec`). So once the process is stopping, an item in flight hands
itself back to the queue before its next model step, and a wait for the
model API (a rate limit, an outage, a model server that went away with the
Ctrl-C) ends at once with the same hand-back. A model call is no effect:
the next attempt makes it again from the item's checkpoint. An effect in
flight is always finished and recorded first.
"""

import logging
import threading

log = logging.getLogger(__name__)

_stopping = threading.Event()
_on_stop: list = []


def on_process_stop(callback) -> None:
    """Call `callback()` when the process starts stopping (the model client cuts its calls in flight)."""
    _on_stop.append(callback)


def process_stop() -> None:
    """Say this process is stopping (the worker's signal handler, in the main thread)."""
    if _stopping.is_set():
        return
    _stopping.set()
    for callback in _on_stop:
        try:
            callback()
        except Exception:  # noqa: BLE001 - a stop goes on whatever one callback does
            log.exception("on stop: %r failed", callback)


def process_stopping() -> bool:
    return _stopping.is_set()
