"""`manage.py check` (and every command's start): settings that cannot work together."""

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register


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


def _autovacuum_setting() -> str | None:
    """The server's `autovacuum`, or None when it cannot be read (the database's own checks say why)."""
    from django.db import DatabaseError, connections

    try:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT current_setting('autovacuum')")
            return cursor.fetchone()[0]
    except DatabaseError:
        return None


@register(Tags.database)
def autovacuum_on(app_configs=None, databases=None, **kwargs):
    """(`check --database default`, and `migrate`) Every item rewrites its rows a few times; without autovacuum their
    dead versions stay, and the ledger's and the event log's queries slow down as they pile up."""
    if not databases or "default" not in databases or _autovacuum_setting() != "off":
        return []
    return [Warning("PostgreSQL runs with autovacuum off: the dead rows every item leaves stay, and the ledger's "
                    "and the event log's queries slow down as they pile up",
                    hint="set autovacuum = on in postgresql.conf (the default), or VACUUM ANALYZE on a schedule",
                    id="ticketagent.W020")]
