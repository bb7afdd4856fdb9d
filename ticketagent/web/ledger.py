"""The ledger as operators see it: the effect classes page (each action's class, channel and abilities)."""

from django.conf import settings
from django.views.decorators.http import require_GET

from ledger.clock import SETTLE_MARGIN_SECONDS
from ticketagent.actions import ACTIONS
from ticketagent.channels.registry import get_channel
from ticketagent.web.access import login_required, render_page


@login_required
@require_GET
def effect_classes(request):
    channels = {name: get_channel(name) for name in {spec.channel for spec in ACTIONS.values()}}
    rows = [(spec, channels[spec.channel]) for spec in ACTIONS.values()]
    timing = [{"name": name, "label": channel.label, "call": channel.max_call_seconds,
               "in_flight": channel.in_flight_seconds,
               "settle": settings.LEASE_SECONDS + channel.max_call_seconds + channel.in_flight_seconds
               + SETTLE_MARGIN_SECONDS} for name, channel in sorted(channels.items())]
    return render_page(request, "ledger/actions.html", None, {
        "rows": rows, "timing": timing, "lease": settings.LEASE_SECONDS, "margin": SETTLE_MARGIN_SECONDS})
