"""A channel's system that is unavailable makes its calls wait, as the model API's outage does: one probe, no failure.

A call that ended with its system unavailable (`Cause.UNAVAILABLE`: no
connection, no answer, a 5xx -- after the reads before its writes were asked
again) marks the system down for every worker: one governor per system
(`ticketagent.governor`, shared through Redis, keyed by
`registry.channel_endpoint`). While it is down, every effect's call waits
for its turn (`channel_turn`); one caller at a time probes the system with a
read that writes nothing (`Channel.probe()`), after 0.25, 0.5, 1 ... s, at
most CHANNEL_PROBE_MAX_SECONDS, and the first answer -- a probe's or a
call's -- ends the wait for all. A call that waited CHANNEL_WAIT_SECONDS
raises `Waited`: its item goes back to the queue, not failed. The task page
says "waiting for the helpdesk since …" meanwhile (`channel_waits`).

Redis only spares a system that is down: when it does not answer, a call
goes ahead without its turn, and nothing here ever raises for it.
"""

import logging
import time
from contextlib import contextmanager

from django.conf import settings
from redis import RedisError

from ledger.channels.base import CallResult, Cause, Channel
from ticketagent.channels.registry import CHANNEL_NAMES, CHANNEL_WORDS, channel_endpoint
from ticketagent.governor import Governor, Limits, Turn, Waited, shared_governor

log = logging.getLogger(__name__)

FIRST_PROBE_SECONDS = 0.25  # a single hiccup costs the other callers this pause and one probe

__all__ = ["ChannelTurn", "Waited", "channel_turn", "channel_waits"]


def _limits() -> Limits:
    # no rate limits of our own; a caller that died mid-call holds its slot no longer than its lease
    return Limits(slot_seconds=settings.LEASE_SECONDS, probe_max_seconds=settings.CHANNEL_PROBE_MAX_SECONDS,
                  first_pause=FIRST_PROBE_SECONDS)


def channel_governor(name: str) -> Governor:
    """The governor of the system the channel `name` reaches now."""
    return shared_governor(f"channel|{name}|{channel_endpoint(name)}", what=CHANNEL_WORDS[name], limits=_limits)


class ChannelTurn:
    """One call's turn (None: taken without one, Redis did not answer); tell it how the call ended."""

    def __init__(self, turn: Turn | None):
        self.turn = turn

    def ended_with(self, result: CallResult) -> None:
        """The system was unavailable (down for everyone until an answer), or it answered (up)."""
        if self.turn is None:
            return
        try:
            if result.cause == Cause.UNAVAILABLE:
                self.turn.unreachable()
                log.warning("%s is unavailable: calls wait for it (%s)", self.turn.governor.what, result.error)
            else:
                self.turn.answered()
        except RedisError as exc:
            log.warning("could not share what a call said of its system: %s", exc)

    def release(self) -> None:
        if self.turn is None:
            return
        try:
            self.turn.release()
        except RedisError as exc:
            log.warning("could not give a channel's turn back: %s", exc)


@contextmanager
def channel_turn(channel: Channel):
    """Wait for the turn to call `channel`'s system: at once while it is up; while it is down, once a
    probe got an answer (this caller probes when it is its turn to). Raises `Waited` after
    CHANNEL_WAIT_SECONDS. Yields a `ChannelTurn` to tell how the call ended; released however it ends."""
    turn = ChannelTurn(_take(channel))
    try:
        yield turn
    finally:
        turn.release()


def _take(channel: Channel) -> Turn | None:
    give_up = time.monotonic() + settings.CHANNEL_WAIT_SECONDS
    try:
        governor = channel_governor(channel.name)
        while True:
            turn = governor.take(give_up=give_up)
            if not turn.probing:
                return turn
            _probe(channel, turn)
    except RedisError as exc:
        log.warning("Redis did not answer: the %s call goes ahead without its turn (%s)", channel.name, exc)
        return None


def _probe(channel: Channel, turn: Turn) -> None:
    """This caller's turn to probe the system that is down: an answer ends the wait for all, none makes
    everyone wait longer."""
    try:
        problem = channel.probe()
    except Exception as exc:  # noqa: BLE001 - a probe that breaks is a probe without an answer
        problem = f"{type(exc).__name__}: {exc}"
    if problem:
        turn.unreachable()
        turn.release()
        log.info("%s still unavailable: %s", turn.governor.what, problem)
    else:
        turn.answered()
        log.warning("%s answers again: the calls waiting for it go on", turn.governor.what)


def channel_waits() -> list[str]:
    """"waiting for the helpdesk since …", for each channel whose system is down now (none when Redis does not
    answer)."""
    words = []
    for name in CHANNEL_NAMES:
        try:
            governor = channel_governor(name)
            if governor.down_since() is not None:
                words.append(governor.waiting_words())
        except RedisError:
            continue
    return words
