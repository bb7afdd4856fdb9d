"""The ledger as operators see it: the effect classes page, and an item's checkpoint with its effects and events."""

import json

from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET

from ledger.actions import ACTIONS
from ledger.channels.registry import get_channel
from ledger.models import Effect
from ticketagent.models import Checkpoint, Event, Item
from ticketagent.web.access import login_required, render_page


@login_required
@require_GET
def effect_classes(request):
    channels = {name: get_channel(name) for name in {spec.channel for spec in ACTIONS.values()}}
    rows = [(spec, channels[spec.channel]) for spec in ACTIONS.values()]
    return render_page(request, "ledger/actions.html", None, {"rows": rows})


@login_required
@require_GET
def item_checkpoint(request, pk):
    item = get_object_or_404(Item.objects.select_related("task"), pk=pk)
    checkpoint = Checkpoint.objects.filter(item=item).first()
    return render_page(request, "tasks/item.html", None, {
        "item": item, "checkpoint": checkpoint,
        "checkpoint_json": json.dumps(checkpoint.snapshot(), indent=2, ensure_ascii=False) if checkpoint else "",
        "effects": Effect.objects.filter(owner_item=item.ref).order_by("id"),
        "events": Event.objects.filter(item=item).order_by("id")[:200],
    })
