"""Dashboard views: validate, authorize, call one service, render.

Every page renders in full without JavaScript; with htmx the same template
returns just the fragment that changed (django-template-partials).
"""

import functools
import json

from django import forms
from django.conf import settings
from django.contrib.auth import decorators as auth_decorators
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from ledger.actions import ACTIONS
from ledger.channels import CHANNELS
from ledger.models import Effect
from ledger.services import ReviewError, effect_reconcile, effect_review
from ticketagent import selectors
from ticketagent.export import event_line
from ticketagent.models import Checkpoint, Event, Item, NotifyChannel, Task
from ticketagent.plan import STEPS
from ticketagent.services import (
    ServiceError,
    UploadRejected,
    item_approve,
    task_cancel,
    task_clone_unfinished,
    task_dry_run,
    task_pause,
    task_resume,
    task_upload,
)

OPERATORS = "operators"
HTMX_STOP_POLLING = 286


def login_required(view):
    """Django's login_required, plus: an htmx request of a logged-out user
    (an expired session while a page polls) sends the whole page to the login
    form instead of swapping the login form into a fragment."""
    plain = auth_decorators.login_required(view)

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        if request.htmx and not request.user.is_authenticated:
            here = request.htmx.current_url_abs_path or request.get_full_path()
            response = HttpResponse(status=204)
            response["HX-Redirect"] = redirect_to_login(here)["Location"]
            return response
        return plain(request, *args, **kwargs)

    return wrapper


def is_operator(user) -> bool:
    return user.is_authenticated and (user.is_superuser or user.groups.filter(name=OPERATORS).exists())


def _require_operator(request):
    if not is_operator(request.user):
        raise PermissionDenied("operators only: viewers may look but not act")


def _actor(request) -> str:
    return request.user.get_username()


def _task(pk) -> Task:
    return get_object_or_404(Task, pk=pk)


def _go_to_task(request, task: Task):
    """After creating a task: its page (htmx follows HX-Redirect, a form a 302)."""
    url = reverse("task-detail", args=[task.pk])
    if request.htmx:
        response = HttpResponse(status=204)
        response["HX-Redirect"] = url
        return response
    return redirect(url)


def _render(request, template, fragment, context, status=200):
    name = f"{template}#{fragment}" if request.htmx and fragment else template
    context.setdefault("can_act", is_operator(request.user))
    return render(request, name, context, status=status)


# --------------------------------------------------------------------------- tasks


@login_required
@require_GET
def task_list(request):
    status_filter = request.GET.get("status", "")
    if status_filter not in selectors.FILTERS:
        status_filter = ""
    context = {
        "tasks": selectors.tasks_for_dashboard(status_filter=status_filter),
        "status_filter": status_filter,
        "filters": [(f, f.replace("_", " ")) for f in selectors.FILTERS],
        "health": selectors.health_numbers(),
        "health_cache_seconds": settings.HEALTH_CACHE_SECONDS,
        "unknown_warn": settings.UNKNOWN_AGE_WARN_SECONDS,
    }
    # The htmx poll gets the table, plus the tiles as an out-of-band swap.
    return _render(request, "tasks/list.html", "task-table", context)


class UploadForm(forms.Form):
    file = forms.FileField(allow_empty_file=True,
                           help_text="CSV or JSONL; columns ticket_id, customer_email, subject, body "
                                     "(+ customer_name, priority, language, metadata)")
    name = forms.CharField(required=False, max_length=200)
    notify_channel = forms.ChoiceField(choices=NotifyChannel.choices, initial=NotifyChannel.HELPDESK)
    allow_auto_close = forms.BooleanField(required=False, label="Allow automatic close",
                                          help_text="Otherwise every close waits for an operator's approval.")
    failure_threshold = forms.IntegerField(min_value=1, max_value=1000, initial=3, required=False,
                                           help_text="Consecutive failed items that suspend the task.")


@login_required
def upload(request):
    errors = []
    if request.method == "POST":
        _require_operator(request)
        form = UploadForm(request.POST, request.FILES)
        if form.is_valid():
            f = form.cleaned_data["file"]
            # The request body is capped before it is read (middleware); the
            # parser checks the file's own cap first, with the same words as
            # `manage.py upload`.
            try:
                task = task_upload(
                    data=f.read(), filename=f.name, user=request.user, name=form.cleaned_data["name"],
                    allow_auto_close=form.cleaned_data["allow_auto_close"],
                    notify_channel=form.cleaned_data["notify_channel"],
                    failure_threshold=form.cleaned_data["failure_threshold"])
            except UploadRejected as exc:
                errors = [str(e) for e in exc.errors]
            else:
                return _go_to_task(request, task)
    else:
        form = UploadForm()
    status = 400 if errors or form.errors else 200
    return _render(request, "tasks/upload.html", "upload-form", {"form": form, "errors": errors}, status=status)


def _detail_context(request, task: Task, **extra) -> dict:
    items = Paginator(task.items.select_related("checkpoint").order_by("row"), 50).get_page(request.GET.get("page"))
    return {
        "task": task,
        "progress": selectors.task_progress(task),
        "items": items,
        "effects_by_item": selectors.items_page_effects(items),
        "events": selectors.task_recent_events(task),
        "step_count": len(STEPS),
        **extra,
    }


@login_required
@require_GET
def task_detail(request, pk):
    task = _task(pk)
    # The items table polls itself (with its page) while the task runs.
    fragment = "items" if request.htmx and request.headers.get("HX-Target") == "items" else None
    return _render(request, "tasks/detail.html", fragment, _detail_context(request, task))


@login_required
@require_GET
def task_progress(request, pk):
    """The polled progress fragment. The page says which status it shows
    (`?shown=`); when the task moved on, the actions come along out of band,
    so a task that got suspended while the page was open offers Resume."""
    task = _task(pk)
    context = {"task": task, "progress": selectors.task_progress(task),
               "refresh_actions": request.htmx and request.GET.get("shown", task.status) != task.status}
    response = _render(request, "tasks/detail.html", "progress", context)
    if task.is_final and request.htmx:
        response.status_code = HTMX_STOP_POLLING
    return response


@login_required
@require_GET
def task_events_jsonl(request, pk):
    task = _task(pk)

    def lines():
        for event in Event.objects.filter(task=task).order_by("id").iterator(chunk_size=2000):
            yield json.dumps(event_line(event), ensure_ascii=False) + "\n"

    response = StreamingHttpResponse(lines(), content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="task-{task.pk}-events.jsonl"'
    return response


@login_required
@require_GET
def task_dry_run_view(request, pk):
    """What resuming would do. With htmx: the dry-run opens in place under the
    actions; without JavaScript: the task page with the dry-run in it."""
    task = _task(pk)
    plan = task_dry_run(task_id=task.pk)
    if request.htmx:
        return _render(request, "tasks/detail.html", "dry-run", {"task": task, "plan": plan})
    return _render(request, "tasks/detail.html", None, _detail_context(request, task, plan=plan))


def _task_action(request, pk, action, done_message):
    """Pause, cancel, resume: one service call. With htmx the actions
    fragment comes back (the error inline, 409); without, the task page."""
    _require_operator(request)
    task = _task(pk)
    error = message = ""
    try:
        message = done_message(action(task_id=task.pk, actor=_actor(request)))
    except ServiceError as exc:
        error = str(exc)
    task.refresh_from_db()
    status = 409 if error else 200
    if not request.htmx:
        if not error:
            return redirect("task-detail", pk=task.pk)
        return _render(request, "tasks/detail.html", None,
                       _detail_context(request, task, action_error=error), status=status)
    return _render(request, "tasks/detail.html", "action-result",
                   {"task": task, "action_error": error, "action_message": message,
                    "progress": selectors.task_progress(task)}, status=status)


@login_required
@require_POST
def task_resume_view(request, pk):
    return _task_action(request, pk, task_resume, lambda plan: (
        f"Resumed: {plan.will_enqueue} item{'s' if plan.will_enqueue != 1 else ''} enqueued."))


@login_required
@require_POST
def task_pause_view(request, pk):
    return _task_action(request, pk, task_pause, lambda task: "Paused: no more items start until you resume.")


@login_required
@require_POST
def task_cancel_view(request, pk):
    return _task_action(request, pk, task_cancel, lambda task: "Cancelled: queued items were skipped.")


@login_required
@require_POST
def task_clone_view(request, pk):
    _require_operator(request)
    task = _task(pk)
    try:
        new = task_clone_unfinished(task_id=task.pk, user=request.user)
    except ServiceError as exc:
        if request.htmx:
            return _render(request, "tasks/detail.html", "actions", {"task": task, "action_error": str(exc)},
                           status=409)
        return _render(request, "tasks/detail.html", None, _detail_context(request, task, action_error=str(exc)),
                       status=409)
    return _go_to_task(request, new)


# --------------------------------------------------------------------------- review


def _lookup_channels() -> set[str]:
    return {n for n, c in CHANNELS.items() if c.supports_lookup}


def _review_page(request, *, error="", status=200):
    unknown, approvals = selectors.review_queue(unknown_page=request.GET.get("unknown_page"),
                                                approvals_page=request.GET.get("approvals_page"))
    return _render(request, "review/queue.html", None, {
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
    return _render(request, "review/queue.html", "effect-row", {
        "effect": effect, "error": error, "lookup_channels": _lookup_channels(),
        "unknown_warn": settings.UNKNOWN_AGE_WARN_SECONDS,
    }, status=status)


@login_required
@require_POST
def effect_reconcile_view(request, pk):
    _require_operator(request)
    effect = get_object_or_404(Effect, pk=pk)
    error = ""
    if effect.channel not in _lookup_channels():
        error = f"the {effect.channel} channel has no look-up by key: decide by hand, with a reason"
    else:
        effect = effect_reconcile(effect_id=effect.pk, actor=_actor(request), force=True)
    return _effect_answer(request, effect, error)


@login_required
@require_POST
def effect_review_view(request, pk):
    _require_operator(request)
    effect = get_object_or_404(Effect, pk=pk)
    error = ""
    try:
        effect = effect_review(effect_id=effect.pk, verdict=request.POST.get("verdict", ""),
                               reason=request.POST.get("reason", ""), actor=_actor(request))
    except ReviewError as exc:
        error = str(exc)
        effect.refresh_from_db()
    return _effect_answer(request, effect, error)


@login_required
@require_POST
def item_approval_view(request, pk):
    _require_operator(request)
    item = get_object_or_404(Item, pk=pk)
    error = ""
    approval = request.POST.get("approval", "")
    try:
        if approval not in ("approve", "reject"):
            raise ServiceError("choose approve or reject")
        item = item_approve(item_id=item.pk, approved=approval == "approve",
                            reason=request.POST.get("reason", ""), actor=_actor(request))
    except ServiceError as exc:
        error = str(exc)
        item.refresh_from_db()
    status = 409 if error else 200
    if not request.htmx:
        if error:
            return _review_page(request, error=f"item {item.ticket_id}: {error}", status=status)
        return redirect("review")
    return _render(request, "review/queue.html", "approval-row", {"item": item, "error": error}, status=status)


# --------------------------------------------------------------------------- ledger + metrics


@login_required
@require_GET
def effect_classes(request):
    rows = [(spec, CHANNELS[spec.channel]) for spec in ACTIONS.values()]
    return _render(request, "ledger/actions.html", None, {"rows": rows})


@login_required
@require_GET
def item_checkpoint(request, pk):
    item = get_object_or_404(Item.objects.select_related("task"), pk=pk)
    checkpoint = Checkpoint.objects.filter(item=item).first()
    return _render(request, "tasks/item.html", None, {
        "item": item, "checkpoint": checkpoint,
        "checkpoint_json": json.dumps(checkpoint.snapshot(), indent=2, ensure_ascii=False) if checkpoint else "",
        "effects": Effect.objects.filter(owner_item=item.ref).order_by("id"),
        "events": Event.objects.filter(item=item).order_by("id")[:200],
    })
