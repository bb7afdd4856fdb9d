"""The ledger as operators see it: the effect classes page (each action's class, channel and abilities)."""

from django.views.decorators.http import require_GET

from ledger.actions import ACTIONS
from ledger.channels.registry import get_channel
from ticketagent.web.access import login_required, render_page


@login_required
@require_GET
def effect_classes(request):
    channels = {name: get_channel(name) for name in {spec.channel for spec in ACTIONS.values()}}
    rows = [(spec, channels[spec.channel]) for spec in ACTIONS.values()]
    return render_page(request, "ledger/actions.html", None, {"rows": rows})
