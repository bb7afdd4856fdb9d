"""A channel's system that was unavailable makes every call to it wait for one probe, on a real Redis
(ticketagent/channels/waiting.py): the wait is shared by every caller, the probe is a read of the channel's own
(`Channel.probe()`), the first answer ends it, and a wait that lasts too long hands the item back (`Waited`).

Each test has a helpdesk of its own (its URL names the shared state), so nothing carries over.
"""

import uuid

import pytest

from ledger.channels.base import Cause, Channel, committed, failed
from ticketagent.channels.waiting import Waited, channel_turn, channel_waits

pytestmark = pytest.mark.usefixtures("redis_conn")

UNAVAILABLE = failed("could not connect to the helpdesk (4 tries)", answered=False, cause=Cause.UNAVAILABLE)


class Probed(Channel):
    """A channel whose probes answer as scripted ("" answered, else why not), then always."""

    def __init__(self, name: str, probes=()):
        self.name = name
        self.probes = list(probes)
        self.probed = 0

    def probe(self) -> str:
        self.probed += 1
        return self.probes.pop(0) if self.probes else ""


@pytest.fixture
def helpdesk(settings):
    settings.HELPDESK_URL = f"http://helpdesk-{uuid.uuid4().hex[:8]}.test"
    settings.EMAIL_HOST = f"mail-{uuid.uuid4().hex[:8]}.test"
    settings.CHANNEL_PROBE_MAX_SECONDS = 0.5
    settings.CHANNEL_WAIT_SECONDS = 30.0
    return settings


def call_ended(channel: Channel, result) -> None:
    with channel_turn(channel) as turn:
        turn.ended_with(result)


def test_an_unavailable_system_makes_the_next_call_wait_until_a_probe_answers(helpdesk):
    channel = Probed("helpdesk", ["no answer", "503"])
    assert channel_waits() == []
    call_ended(channel, UNAVAILABLE)
    [words] = channel_waits()
    assert words.startswith("waiting for the helpdesk since ") and words.endswith(" UTC")
    with channel_turn(channel):  # probed until the third probe answered
        assert channel.probed == 3
    assert channel_waits() == []
    call_ended(channel, committed("r1"))
    assert channel.probed == 3, "an answering system is not probed"


def test_a_refusal_is_an_answer_and_ends_the_wait(helpdesk):
    channel = Probed("helpdesk")
    call_ended(channel, UNAVAILABLE)
    assert channel_waits()
    with channel_turn(channel) as turn:  # the probe answered: this call goes
        turn.ended_with(failed("the helpdesk refused with 404", answered=True, cause=Cause.REFUSED))
    assert channel_waits() == []


def test_a_call_waits_no_longer_than_channel_wait_seconds(helpdesk):
    helpdesk.CHANNEL_WAIT_SECONDS = 1.0
    channel = Probed("helpdesk", ["no answer"] * 100)
    call_ended(channel, UNAVAILABLE)
    with pytest.raises(Waited) as caught:
        with channel_turn(channel):
            pytest.fail("called while the helpdesk is down")
    assert caught.value.why.startswith("waiting for the helpdesk since "), caught.value.why
    assert 1 <= channel.probed <= 4  # probed with a back-off, not in a tight loop


def test_each_system_waits_on_its_own(helpdesk):
    call_ended(Probed("helpdesk"), UNAVAILABLE)
    mail = Probed("email")
    with channel_turn(mail):
        pass
    assert mail.probed == 0
    [words] = channel_waits()
    assert words.startswith("waiting for the helpdesk")
    call_ended(mail, failed("could not connect to the mail server", answered=False, cause=Cause.UNAVAILABLE))
    assert sorted(w.split(" since")[0] for w in channel_waits()) == ["waiting for the helpdesk",
                                                                     "waiting for the mail server"]


def test_without_redis_a_call_goes_ahead_and_nothing_waits(helpdesk):
    helpdesk.REDIS_URL = "redis://127.0.0.1:9/0"  # nothing listens there
    channel = Probed("helpdesk")
    call_ended(channel, UNAVAILABLE)
    with channel_turn(channel):
        pass
    assert channel.probed == 0 and channel_waits() == []
