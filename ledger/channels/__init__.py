"""Channels: the contract every adapter keeps (`base`), an HTTP client for adapters (`http`), redaction.

The owner of the effects provides the adapters and tells the ledger how to
find them: the setting LEDGER_CHANNELS names a callable that returns a fresh
adapter for a channel name (as EMAIL_BACKEND names a mail backend). The
ledger itself names no system.
"""

import functools
from typing import TYPE_CHECKING

from django.conf import settings
from django.utils.module_loading import import_string

if TYPE_CHECKING:  # (the logging set-up imports `redact` before the apps are loaded: no models here)
    from ledger.channels.base import Channel


@functools.cache
def _resolver(path: str):
    return import_string(path)


def get_channel(name: str) -> "Channel":
    """A fresh adapter for the channel `name`, as the owner configures it now."""
    return _resolver(settings.LEDGER_CHANNELS)(name)


def channel_names() -> list[str]:
    """Every channel an action of the registered table names."""
    from ledger.actions import registered_actions

    return sorted({spec.channel for spec in registered_actions().values()})


def lookup_channel_names() -> list[str]:
    """The channels whose unknown effects reconcile can settle (their adapter can look an effect up)."""
    return [name for name in channel_names() if get_channel(name).supports_lookup]
