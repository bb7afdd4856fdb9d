"""The review queue: what waits for a person, and the verdicts, approvals, retries and skips that settle it.

Unknown effects (reconcile now, or a verdict with a reason, with the evidence
that is known), closes waiting for approval, failed items of tasks that need
review (retry, or skip with a reason), suspended tasks (resume after the
dry-run), and the audit trail. The header's attention counts link here.
"""

from urllib.parse import urlencode

from django.conf import settings
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_GET, require_POST

from ledger.channels import lookup_channel_names
from ledger.models import Effect
from ledger.services import ReviewError, effect_reconcile, effect_review
from ticketagent.models import Approval, Item
from ticketagent.services import ServiceError
from ticketagent.services.items import item_approve
from ticketagent.web.access import actor, login_required, render_page, require_operator
from ticketagent.web.selectors import review as selectors_review


def _review_page(request, *, error="", status=200, extra=None):
    get = request.GET.get
    pages = {k: v for k, v in request.GET.items() if k in ("unknown_page", "approvals_page", "failed_page")}
    fragment = "review-live" if request.method == "GET" or extra is not None else None
    return render_page(request, "review/queue.html", fragment, {
        **(extra or {}),
        "live_query": urlencode(pages),
        "unknown": selectors_review.review_unknown(get("unknown_page")),
        "approvals": selectors_review.review_approvals(get("approvals_page")),
        "failed": selectors_review.review_failed(get("failed_page")),
        "suspended": selectors_review.suspended_tasks(),
        "recent": selectors_review.audit_trail(),
        "page_error": error, "unknown_warn": settings.UNKNOWN_AGE_WARN_SECONDS,
    }, status=status, live="review-live")


@login_required
@require_GET
def review_queue(request):
    return _review_page(request)


@login_required
@require_GET
def attention(request):
    """The header's counts (polled), with the Review link's count beside them (out of band). 204 while they are
    what the page shows (web/live.py)."""
    return render_page(request, "base.html", "attention", {
        "attention": selectors_review.attention_counts(), "attention_poll": True})


def _effect_answer(request, effect, error=""):
    """After reconcile or a verdict: the updated row (htmx), else the page."""
    status = 409 if error else 200
    if not request.htmx:
        if error:
            return _review_page(request, error=f"effect {effect.pk}: {error}", status=status)
        return redirect("review")
    [effect] = selectors_review.with_evidence([effect])
    return render_page(request, "review/queue.html", "effect-row", {
        "effect": effect, "error": error, "unknown_warn": settings.UNKNOWN_AGE_WARN_SECONDS,
    }, status=status)


@login_required
@require_POST
def effect_reconcile_view(request, pk):
    require_operator(request)
    effect = get_object_or_404(Effect, pk=pk)
    error = ""
    if effect.channel not in lookup_channel_names():
        error = f"the {effect.channel} channel has no look-up by key: decide by hand, with a reason"
    else:
        # at any time: a found write commits at once; "not found" counts only from the settle time
        effect = effect_reconcile(effect_id=effect.pk, actor=actor(request))
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


def _item_answer(request, item, fragment: str, error: str):
    """After an approval, a retry or a skip: the updated row (htmx), else the page."""
    status = 409 if error else 200
    if not request.htmx:
        if error:
            return _review_page(request, error=f"item {item.ticket_id}: {error}", status=status)
        return redirect("review")
    item.refresh_from_db()
    if fragment == "approval-row":  # what is held and what each choice would do, as the page shows it
        selectors_review.approvals_context([item])
    return render_page(request, "review/queue.html", fragment, {"item": item, "error": error}, status=status)


# the review form's buttons (`approval`) -> the decision they record
APPROVAL_BUTTONS = {"approve": Approval.APPROVED, "reject": Approval.REJECTED, "reject_stop": Approval.STOPPED}
BULK_WORDS = {Approval.APPROVED: "Approved", Approval.REJECTED: "Rejected (the rest done)",
              Approval.STOPPED: "Rejected and stopped"}


@login_required
@require_POST
def item_approval_view(request, pk):
    require_operator(request)
    item = get_object_or_404(Item.objects.select_related("task"), pk=pk)
    error = ""
    try:
        item_approve(item_id=item.pk, decision=APPROVAL_BUTTONS.get(request.POST.get("approval", ""), ""),
                     reason=request.POST.get("reason", ""), actor=actor(request))
    except ServiceError as exc:
        error = str(exc)
    return _item_answer(request, item, "approval-row", error)


@login_required
@require_POST
def item_approvals_view(request):
    """Approve or reject (doing the rest, or stopping them) the selected items with one reason: each decided on
    its own (`item_approve`: its own event, with the operator's name), those that no longer wait named in the
    answer; nothing changes without a reason or a choice."""
    require_operator(request)
    decision, reason = APPROVAL_BUTTONS.get(request.POST.get("approval", "")), request.POST.get("reason", "").strip()
    ids = [int(i) for i in request.POST.getlist("items") if i.isdigit()]
    errors, done = [], []
    if decision is None:
        errors.append("choose approve or reject (doing the rest, or stopping the item)")
    elif not ids:
        errors.append("select the items to decide first")
    elif not reason:
        errors.append("a reason is required to approve or reject")
    else:
        for item in Item.objects.filter(pk__in=ids).order_by("updated_at", "id"):
            try:
                item_approve(item_id=item.pk, decision=decision, reason=reason, actor=actor(request))
                done.append(item.ticket_id)
            except ServiceError as exc:
                errors.append(f"{item.ticket_id}: {exc}")
    result = f"{BULK_WORDS[decision]} {len(done)}: {', '.join(done)}." if done else ""
    if not request.htmx:
        if errors and not done:
            return _review_page(request, error="; ".join(errors), status=409)
        return redirect("review")
    return _review_page(request, status=409 if errors and not done else 200,
                        extra={"bulk_result": result, "bulk_errors": errors})


@login_required
@require_POST
def failed_item_control_view(request, pk, service):
    """Retry or skip a failed item (`service`: `item_retry` or `item_skip`, from the URL): one service call, the
    row (htmx) or the page back."""
    require_operator(request)
    item = get_object_or_404(Item.objects.select_related("task"), pk=pk)
    error = ""
    try:
        service(item_id=item.pk, reason=request.POST.get("reason", ""), actor=actor(request))
    except ServiceError as exc:
        error = str(exc)
    return _item_answer(request, item, "failed-row", error)
