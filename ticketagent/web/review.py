"""The review queue: unknown effects (reconcile now, or a verdict with a reason) and closes waiting for approval."""

from django.conf import settings
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_GET, require_POST

from ledger.channels.registry import lookup_channel_names
from ledger.models import Effect
from ledger.services import ReviewError, effect_reconcile, effect_review
from ticketagent.models import Item
from ticketagent.services import ServiceError
from ticketagent.services.items import item_approve
from ticketagent.web import selectors
from ticketagent.web.access import actor, login_required, render_page, require_operator


def _lookup_channels() -> set[str]:
    return set(lookup_channel_names())


def _review_page(request, *, error="", status=200):
    unknown, approvals = selectors.review_queue(unknown_page=request.GET.get("unknown_page"),
                                                approvals_page=request.GET.get("approvals_page"))
    return render_page(request, "review/queue.html", None, {
        "unknown": unknown, "approvals": approvals, "lookup_channels": _lookup_channels(),
        "page_error": error, "unknown_warn": settings.UNKNOWN_AGE_WARN_SECONDS,
        "recent": Effect.objects.exclude(resolved_by="").order_by("-updated_at")[:30],
    }, status=status)


@login_required
@require_GET
def review_queue(request):
    return _review_page(request)


def _effect_answer(request, effect, error=""):
    """After reconcile or a verdict: the updated row (htmx), else the page."""
    status = 409 if error else 200
    if not request.htmx:
        if error:
            return _review_page(request, error=f"effect {effect.pk}: {error}", status=status)
        return redirect("review")
    [effect] = selectors.effects_with_owners([effect])
    return render_page(request, "review/queue.html", "effect-row", {
        "effect": effect, "error": error, "lookup_channels": _lookup_channels(),
        "unknown_warn": settings.UNKNOWN_AGE_WARN_SECONDS,
    }, status=status)


@login_required
@require_POST
def effect_reconcile_view(request, pk):
    require_operator(request)
    effect = get_object_or_404(Effect, pk=pk)
    error = ""
    if effect.channel not in _lookup_channels():
        error = f"the {effect.channel} channel has no look-up by key: decide by hand, with a reason"
    else:
        effect = effect_reconcile(effect_id=effect.pk, actor=actor(request), force=True)
    return _effect_answer(request, effect, error)


@login_required
@require_POST
def effect_review_view(request, pk):
    require_operator(request)
    effect = get_object_or_404(Effect, pk=pk)
    error = ""
    try:
        effect = effect_review(effect_id=effect.pk, verdict=request.POST.get("verdict", ""),
                               reason=request.POST.get("reason", ""), actor=actor(request))
    except ReviewError as exc:
        error = str(exc)
        effect.refresh_from_db()
    return _effect_answer(request, effect, error)


@login_required
@require_POST
def item_approval_view(request, pk):
    require_operator(request)
    item = get_object_or_404(Item, pk=pk)
    error = ""
    approval = request.POST.get("approval", "")
    try:
        if approval not in ("approve", "reject"):
            raise ServiceError("choose approve or reject")
        item = item_approve(item_id=item.pk, approved=approval == "approve",
                            reason=request.POST.get("reason", ""), actor=actor(request))
    except ServiceError as exc:
        error = str(exc)
        item.refresh_from_db()
    status = 409 if error else 200
    if not request.htmx:
        if error:
            return _review_page(request, error=f"item {item.ticket_id}: {error}", status=status)
        return redirect("review")
    return render_page(request, "review/queue.html", "approval-row", {"item": item, "error": error}, status=status)
