"""Item pages: an item's full history (steps, attempts, effects, verdicts) and search across tasks; the favicon."""

import json

from django.conf import settings
from django.contrib.staticfiles import finders
from django.http import FileResponse, Http404
from django.shortcuts import get_object_or_404
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET

from ticketagent.eventlog.usage import step_usages
from ticketagent.models import Checkpoint, EventType, Item
from ticketagent.web.access import login_required, render_page
from ticketagent.web.selectors import ops as selectors_ops


@login_required
@require_GET
def item_detail(request, pk):
    item = get_object_or_404(Item.objects.select_related("task"), pk=pk)
    checkpoint = Checkpoint.objects.select_related("playbook_version__playbook").filter(item=item).first()
    events, effects = selectors_ops.item_history(item)
    model_steps, model_usage = step_usages(item.pk)
    # which model served each model step (its last run's STEP_DONE says)
    served = {ev.payload["step"]: ev.payload["model"] for ev in events
              if ev.type == EventType.STEP_DONE and ev.payload.get("model")}
    return render_page(request, "tasks/item.html", None, {
        "item": item, "checkpoint": checkpoint, "decision": selectors_ops.item_decision(item, checkpoint),
        "served": served, "language_gap": selectors_ops.offline_language_gap(item, checkpoint, served),
        "checkpoint_json": json.dumps(checkpoint.snapshot(), indent=2, ensure_ascii=False) if checkpoint else "",
        "effects": effects, "events": events, "model_steps": model_steps, "model_usage": model_usage,
    })


@login_required
@require_GET
def search(request):
    query = request.GET.get("q", "")[:254]
    items, tasks = selectors_ops.search(query)
    return render_page(request, "search.html", None, {
        "search_q": query, "items": items, "tasks": tasks, "limit": selectors_ops.SEARCH_LIMIT})


@require_GET
@cache_control(max_age=86400, public=True)
def favicon(request):
    """/favicon.ico, which browsers ask for on their own: the static icon, for everyone."""
    path = finders.find("favicon.ico") or (settings.STATIC_ROOT / "favicon.ico")
    try:
        return FileResponse(open(path, "rb"), content_type="image/x-icon")
    except OSError:
        raise Http404("no favicon") from None
