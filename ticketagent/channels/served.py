"""The helpdesk this process reaches, asked once per configuration: who it is (`identity.Helpdesk`)."""

import threading

from django.conf import settings

from ticketagent.channels.identity import Helpdesk, IdentityUnknown
from ticketagent.channels.registry import get_channel, helpdesk_kind

_cache: dict[tuple, Helpdesk] = {}
_lock = threading.Lock()


def helpdesk_reached() -> Helpdesk:
    """Ask the configured helpdesk who it is, now. Raises `IdentityUnknown` naming why not."""
    try:
        ident = get_channel("helpdesk").identity()
    except IdentityUnknown:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to ask is an unknown identity, with its reason
        raise IdentityUnknown(f"{type(exc).__name__}: {exc}") from None
    return Helpdesk(kind=helpdesk_kind(), url=settings.HELPDESK_URL, id=ident)


def helpdesk_served() -> Helpdesk:
    """The helpdesk this process serves: asked once per configuration and kept (a worker's queue is chosen
    from it at start). Raises `IdentityUnknown` while the helpdesk has not answered."""
    key = (helpdesk_kind(), settings.HELPDESK_URL)
    with _lock:
        known = _cache.get(key)
    if known is None:
        known = helpdesk_reached()
        with _lock:
            _cache[key] = known
    return known


def helpdesk_known() -> Helpdesk | None:
    """The helpdesk this process serves if it asked already (no call)."""
    with _lock:
        return _cache.get((helpdesk_kind(), settings.HELPDESK_URL))
