"""`manage.py check` (and every command's start): settings that cannot work together."""

from django.conf import settings
from django.core.checks import Error, register


@register()
def lease_covers_calls(app_configs=None, **kwargs):
    """A worker calls out only while its lease is known valid for the whole
    call: LEASE_SECONDS must exceed each channel's longest call plus the
    margin and a heartbeat's interval, or every effect would be handed back."""
    from ledger.channels.base import ChannelError
    from ticketagent.channels.registry import get_channel

    errors = []
    for name in ("helpdesk", "email"):
        try:
            call = get_channel(name).max_call_seconds
        except (ChannelError, KeyError, ValueError):
            continue
        need = call + settings.LEASE_MARGIN_SECONDS + settings.HEARTBEAT_SECONDS
        if settings.LEASE_SECONDS <= need:
            errors.append(Error(
                f"LEASE_SECONDS={settings.LEASE_SECONDS:g} is too short for the {name} channel: its longest call "
                f"takes {call:g} s, so the lease must exceed {need:g} s (the call + LEASE_MARGIN_SECONDS "
                f"+ HEARTBEAT_SECONDS)",
                hint="raise LEASE_SECONDS, or lower the channel's timeouts", id="ticketagent.E010"))
    return errors
