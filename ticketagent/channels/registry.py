"""Which adapter serves each channel: `helpdesk` by HELPDESK_KIND (rest, rt, zendesk), `email` by SMTP.

The action table (`ticketagent.actions`) names a channel per action; this
module turns that name into the configured adapter. The setting
LEDGER_CHANNELS tells the ledger to ask `get_channel` here.
"""

from django.conf import settings

from ledger.channels.base import Channel, ChannelError
from ticketagent.channels.rest import RestHelpdeskChannel
from ticketagent.channels.rt import RTChannel
from ticketagent.channels.smtp import EmailChannel
from ticketagent.channels.zendesk import ZendeskChannel

HELPDESK_KINDS: dict[str, type[Channel]] = {"rest": RestHelpdeskChannel, "rt": RTChannel, "zendesk": ZendeskChannel}
CHANNEL_NAMES = ("helpdesk", "email")
# each channel's system, in the words people read ("waiting for the helpdesk since …", "refused by the helpdesk")
CHANNEL_WORDS = {"helpdesk": "the helpdesk", "email": "the mail server"}


def helpdesk_kind() -> str:
    return getattr(settings, "HELPDESK_KIND", "rest") or "rest"


def get_channel(name: str) -> Channel:
    """A fresh adapter for the channel `name`, as configured now."""
    if name == "email":
        return EmailChannel()
    if name != "helpdesk":
        raise ValueError(f"unknown channel {name!r}; known: {', '.join(CHANNEL_NAMES)}")
    kind = helpdesk_kind()
    try:
        cls = HELPDESK_KINDS[kind]
    except KeyError:
        raise ChannelError(f"HELPDESK_KIND={kind!r} is not one of: {', '.join(sorted(HELPDESK_KINDS))}") from None
    return cls()


def channel_endpoint(name: str) -> str:
    """Which system the channel `name` reaches, as configured now: workers configured alike share what they
    learn of it (`ticketagent.channels.waiting`)."""
    if name == "email":
        return f"smtp|{settings.EMAIL_HOST}:{settings.EMAIL_PORT}"
    if name != "helpdesk":
        raise ValueError(f"unknown channel {name!r}; known: {', '.join(CHANNEL_NAMES)}")
    return f"{helpdesk_kind()}|{settings.HELPDESK_URL}"
