"""The channel contract: how an action becomes a call, what its outcome means, and how an effect is found again.

A channel is one system the agent acts on (a helpdesk, email). Every
adapter implements the same two operations:

* `perform(spec, payload, key, deadline) -> CallResult`: make the call for
  one action, with the effect's idempotency key carried the way the system
  keeps it (a header, a custom field, audit metadata, a marker in the
  content), asking `deadline` (a `CallDeadline`) right before each request
  leaves (`ledger.channels.http` does, for every write it sends). The
  outcome is classified strictly:
    committed - the system said yes;
    failed    - the answer proves nothing happened (the request never left
                this process, or a refusal such as a 4xx validation error);
    unknown   - anything else once the request may have left: timeouts,
                resets, 5xx, a dropped connection.
  and what did not commit says why (`Cause`): the system refused it, it was
  unavailable (no connection, no answer, a server error: nobody's fault, the
  caller waits for it), or the action could not be made as asked.
* `lookup(key, payload) -> LookupResult`: did the write with this key land?
  `found=True` (with the external reference), `found=False` only when the
  system's answer is authoritative (it was asked and answered in full), and
  `found=None` when it cannot tell.
* `probe() -> str`: one request that writes nothing, to learn whether the
  system answers again after it was unavailable ("" when it did).

Each channel declares its abilities (`Abilities`), shown per channel on the
Effect classes page. Adapters hold no state between calls beyond their
configuration, and never open a database transaction.
"""

import time
from dataclasses import dataclass

from ledger.actions import ActionSpec
from ledger.channels.redact import redact
from ledger.models import EffectState


class Cause:
    """Why a call did not commit, as far as its answer shows (`CallResult.cause`)."""

    # the system refused the request: a 4xx in its own words, a missing right, a thing that does not exist
    REFUSED = "refused"
    # the system could not be reached, did not answer in time, or answered a server error, a timeout or
    # a rate limit: nobody's fault, and the reads before a write were asked again already
    UNAVAILABLE = "unavailable"
    # the action cannot be made as asked (its payload, the channel's configuration): nothing was sent
    INVALID = "invalid"


@dataclass(frozen=True)
class CallResult:
    state: str  # EffectState.COMMITTED / FAILED / UNKNOWN
    external_ref: str = ""
    error: str = ""
    # Whether the system answered at all (a status line came back): an
    # answered request cannot still land later; one that timed out might.
    answered: bool = False
    # Why it did not commit (a `Cause`); "" when committed, or an unknown outcome whose system answered
    cause: str = ""

    def __post_init__(self):
        object.__setattr__(self, "error", redact(self.error))
        object.__setattr__(self, "external_ref", redact(self.external_ref))


@dataclass(frozen=True)
class LookupResult:
    found: bool | None  # None: the channel cannot tell
    external_ref: str = ""
    detail: str = ""

    def __post_init__(self):
        object.__setattr__(self, "detail", redact(self.detail))
        object.__setattr__(self, "external_ref", redact(self.external_ref))


@dataclass(frozen=True)
class Abilities:
    """What a channel can do for exactly-once, in words an operator reads."""

    key_carried: str  # how the idempotency key travels with the write ("" if it does not)
    honours_key: bool  # the system itself refuses a second write with the same key
    lookup: str  # how an effect is found again by its key ("" if it cannot be)

    @property
    def sends_key(self) -> bool:  # the effect classes page (templates/ledger/actions.html)
        return bool(self.key_carried)

    @property
    def supports_lookup(self) -> bool:
        return bool(self.lookup)


class Expired(Exception):
    """The call's deadline came before its request could leave: nothing of it was sent."""


class CallDeadline:
    """The time (monotonic) by which a call must have ended, and what it sent so far.

    The gate makes one for each `perform()`, from the caller's deadline (its
    lease, known valid until then), and passes it; a call without one is an
    error. A channel asks `room_to_send(wait)` right before a request's bytes
    leave and stops with `Expired` when the answer could not come back in
    time -- the caller's lease would end first. `writes_sent` tells the gate
    whether an `Expired` call left anything behind (an action made of
    several writes)."""

    def __init__(self, deadline: float):
        if not isinstance(deadline, int | float):
            raise TypeError(f"a call's deadline is a monotonic time in seconds, not {deadline!r}")
        self.deadline = float(deadline)
        self.writes_sent = 0

    @classmethod
    def within(cls, seconds: float) -> "CallDeadline":
        """A deadline `seconds` from now (a caller with no lease of its own: a test, a bench, a read)."""
        return cls(time.monotonic() + seconds)

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    def room_to_send(self, wait: float, what: str = "the request") -> None:
        left = self.time_left()
        if left < wait:
            raise Expired(f"{what} not sent: {max(left, 0):.1f} s left of the caller's claim, "
                          f"the answer may take {wait:.1f} s")


class ChannelError(Exception):
    """A channel that cannot be used as configured (missing URL, unknown kind)."""


class Channel:
    """The contract every adapter implements (see the module docstring)."""

    name = ""
    label = ""
    abilities = Abilities(key_carried="", honours_key=False, lookup="")

    @property
    def sends_key(self) -> bool:  # the effect classes page (templates/ledger/actions.html)
        return bool(self.key_carried)

    @property
    def supports_lookup(self) -> bool:
        return self.abilities.supports_lookup

    @property
    def max_call_seconds(self) -> float:
        """The longest one `perform()` can take: reconcile waits this long past
        an intent before it asks, so a call still in flight is not missed."""
        return 10.0

    @property
    def in_flight_seconds(self) -> float:
        """How long a request that left this process may still land after the
        call gave up on it: a gateway in front of the system (nginx, Apache)
        may hand it upstream long after it answered 504. Reconcile trusts a
        "not found" only this long after the call's end."""
        return 0.0

    def perform(self, spec: ActionSpec, payload: dict, key: str, deadline: CallDeadline) -> CallResult:
        raise NotImplementedError

    def lookup(self, key: str, payload: dict) -> LookupResult:
        return LookupResult(None, detail=f"the {self.name} channel has no look-up by key")

    def check(self) -> list[str]:
        """Verify the connection and what this product needs, writing nothing.
        Returns the problems found (empty: ready)."""
        return []

    def probe(self) -> str:
        """One cheap request that writes nothing: "" when the system answered
        (whatever it said, but a server error, a timeout or a rate limit),
        else why not. A channel without one answers "": its next call is
        then the probe."""
        return ""


def committed(ref: str = "", *, answered: bool = True) -> CallResult:
    return CallResult(EffectState.COMMITTED, external_ref=str(ref), answered=answered)


def failed(error: str, *, answered: bool, cause: str) -> CallResult:
    return CallResult(EffectState.FAILED, error=error, answered=answered, cause=cause)


def unknown(error: str, *, answered: bool, cause: str = "") -> CallResult:
    """`cause` Cause.UNAVAILABLE when the system did not answer, or answered a server error."""
    return CallResult(EffectState.UNKNOWN, error=error, answered=answered, cause=cause)


def answered_at_all(status: int) -> bool:
    """Whether an answer with this status shows the system is there to act: anything but a
    server error, a timeout (408) or a rate limit (429) -- a probe that gets one ends a wait."""
    return status < 500 and status not in (408, 429)
