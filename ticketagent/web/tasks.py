"""Task pages: the list, a task's detail, progress and event export, and the operator's controls.

The controls: pause, cancel, resume (after its dry-run), new task from unfinished items.

Views validate, authorize, call one service, render. Every page renders in
full without JavaScript; with htmx the same template returns just the
fragment that changed (django-template-partials).
"""

import json

from django.conf import settings
from django.core.paginator import Paginator
from django.http import StreamingHttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from ticketagent.eventlog.export import event_line, transition_line
from ticketagent.eventlog.merged import merge, task_transitions
from ticketagent.eventlog.usage import task_usage
from ticketagent.health import health_numbers
from ticketagent.models import ACTIVE_TASK_STATUSES, Event, Task
from ticketagent.plan import steps_of
from ticketagent.services import ServiceError
from ticketagent.services.budget import budget_parse
from ticketagent.services.outcomes import SHOWS, items_shown, show_counts
from ticketagent.services.resume import (
    task_clone_unfinished,
    task_dry_run,
    task_has_work_to_resume,
    task_move_version,
    task_resume,
)
from ticketagent.services.tasks import task_cancel, task_pause
from ticketagent.web import selectors
from ticketagent.web.access import (
    HTMX_STOP_POLLING,
    actor,
    go_to_task,
    login_required,
    render_page,
    require_operator,
    task_or_404,
)


@login_required
@require_GET
def task_list(request):
    """The tasks and the health tiles. The table polls itself (2 s) only while a
    task on it is live (286 stops it); the tiles poll slowly (`?part=health`) and
    bring the table along when a task became live meanwhile."""
    status_filter = request.GET.get("status", "")
    if status_filter not in selectors.FILTERS:
        status_filter = ""
    tasks = selectors.tasks_for_dashboard(status_filter=status_filter)
    live = any(t.status in ACTIVE_TASK_STATUSES for t in tasks)
    context = {
        "tasks": tasks, "live": live,
        "status_filter": status_filter,
        "filters": [(f, f.replace("_", " ")) for f in selectors.FILTERS],
        "health": health_numbers(),
        "health_cache_seconds": settings.HEALTH_CACHE_SECONDS,
        "unknown_warn": settings.UNKNOWN_AGE_WARN_SECONDS,
    }
    if request.htmx and request.GET.get("part") == "health":
        context["bring_table"] = live and request.GET.get("table_live") != "1"
        return render_page(request, "tasks/list.html", "health-poll", context)
    response = render_page(request, "tasks/list.html", "task-table", context, live="task-table")
    if request.htmx and not live:
        response.status_code = HTMX_STOP_POLLING
    return response


def _detail_context(request, task: Task, **extra) -> dict:
    show = request.GET.get("show", "all")
    show = show if show in dict(SHOWS) else "all"
    items = Paginator(items_shown(task.items.select_related("checkpoint").order_by("row"), show), 50).get_page(
        request.GET.get("page"))
    progress = selectors.task_progress(task)
    counts = show_counts(progress.counts, selectors.tasks_nothing_sent([task])[task.pk])
    return {
        "task": task,
        "progress": progress,
        "items": items,
        "show": show, "show_label": dict(SHOWS)[show],
        "served": selectors.task_models(task),
        # Resume is offered (to a stopped task) only when it would do something
        "can_resume": task.status not in ACTIVE_TASK_STATUSES and not task.is_final and task_has_work_to_resume(task),
        "shows": [(key, label, counts[key]) for key, label in SHOWS if counts[key] or key in ("all", show)],
        "effects_by_item": selectors.items_page_effects(items),
        "started": selectors.items_started(items),
        "events": selectors.task_recent_events(task),
        "usage": task_usage(task.pk),
        "model_wait": selectors.model_api_wait() if task.status in ACTIVE_TASK_STATUSES else "",
        "channel_waits": (selectors.channel_waits() if task.status in ACTIVE_TASK_STATUSES and not task.rehearsal
                          else []),
        "step_count": len(steps_of(rehearsal=task.rehearsal)),
        **extra,
    }


@login_required
@require_GET
def task_detail(request, pk):
    task = task_or_404(pk)
    return render_page(request, "tasks/detail.html", None, _detail_context(request, task), live="live")


@login_required
@require_GET
def task_progress(request, pk):
    """The task page's one poll: progress, items table, timeline and resume
    count come together (the last three out of band), so they never disagree.

    The page says what it shows by the digest of its rendering (`seen`, the
    live views' one change cursor: web/live.py) and its status (`shown`):
    unchanged, 204 and nothing is swapped. When the status moved on, the
    controls come along too, so a task that got suspended while the page was
    open offers Resume. Once the task is final: 286, and htmx stops polling."""
    task = task_or_404(pk)
    if not request.htmx:
        return task_detail(request, pk)
    shown = request.GET.get("shown", task.status)
    context = _detail_context(request, task, refresh_controls=shown != task.status)
    response = render_page(request, "tasks/detail.html", "live", context)
    if task.is_final:
        response.status_code = HTMX_STOP_POLLING
    return response


@login_required
@require_GET
def task_events_jsonl(request, pk):
    task = task_or_404(pk)

    def lines():
        # the task's events and its effects' transitions, one log (eventlog.merged); each item named by its ticket
        tickets = dict(task.items.values_list("pk", "ticket_id"))
        events = ((e.timestamp, e.pk, event_line(e))
                  for e in Event.objects.filter(task=task).order_by("id").iterator(chunk_size=2000))
        transitions = ((at, n, transition_line(line)) for at, n, line in task_transitions(task.pk))
        for line in merge(events, transitions):
            if line["item"] is not None:
                line["ticket"] = tickets.get(line["item"])
            yield json.dumps(line, ensure_ascii=False) + "\n"

    response = StreamingHttpResponse(lines(), content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="task-{task.pk}-events.jsonl"'
    return response


@login_required
@require_GET
def task_dry_run_view(request, pk):
    """What resuming would do. With htmx: the dry-run opens in place under the
    actions; without JavaScript: the task page with the dry-run in it."""
    task = task_or_404(pk)
    plan = task_dry_run(task_id=task.pk)
    if request.htmx:
        return render_page(request, "tasks/detail.html", "dry-run", {"task": task, "plan": plan})
    return render_page(request, "tasks/detail.html", None, _detail_context(request, task, plan=plan))


def _task_control(request, pk, service, done_message):
    """A control (pause, cancel, resume): one service call. With htmx the actions
    fragment comes back (the error inline, 409); without, the task page."""
    require_operator(request)
    task = task_or_404(pk)
    error = message = ""
    try:
        message = done_message(service(task_id=task.pk, actor=actor(request)))
    except ServiceError as exc:
        error = str(exc)
    task.refresh_from_db()
    status = 409 if error else 200
    if not request.htmx:
        if not error:  # to the controls, where the new status and the next actions are
            return redirect(reverse("task-detail", args=[task.pk]) + "#controls")
        return render_page(request, "tasks/detail.html", None,
                       _detail_context(request, task, control_error=error), status=status)
    return render_page(request, "tasks/detail.html", "control-result",
                       _detail_context(request, task, control_error=error, control_message=message), status=status)


@login_required
@require_POST
def task_resume_view(request, pk):
    """Resume, with a new budget when the form gives one (needed once the task reached its budget)."""
    def resume(*, task_id, actor):
        return task_resume(task_id=task_id, actor=actor, budget=budget_parse(request.POST.get("budget", "")))

    return _task_control(request, pk, resume, lambda plan: (
        f"Resumed: {plan.will_enqueue} item{'s' if plan.will_enqueue != 1 else ''} enqueued."))


@login_required
@require_POST
def task_pause_view(request, pk):
    return _task_control(request, pk, task_pause, lambda task: "Paused: no more items start until you resume.")


@login_required
@require_POST
def task_move_version_view(request, pk):
    """Move the unfinished items with no effect to the newer playbook version the dry-run offered."""
    version_id = request.POST.get("version", "")

    def move(*, task_id, actor):
        if not version_id.isdigit():
            raise ServiceError("choose the version to move to")
        return task_move_version(task_id=task_id, version_id=int(version_id), actor=actor)

    return _task_control(request, pk, move, lambda n: (
        f"Moved {n} item{'s' if n != 1 else ''} to the newer version: their model steps recompute under it."))


@login_required
@require_POST
def task_cancel_view(request, pk):
    return _task_control(request, pk, task_cancel, lambda task: "Cancelled: queued items were skipped.")


@login_required
@require_POST
def task_clone_view(request, pk):
    require_operator(request)
    task = task_or_404(pk)
    try:
        new = task_clone_unfinished(task_id=task.pk, user=request.user)
    except ServiceError as exc:
        if request.htmx:
            return render_page(request, "tasks/detail.html", "controls", {"task": task, "control_error": str(exc)},
                           status=409)
        return render_page(request, "tasks/detail.html", None, _detail_context(request, task, control_error=str(exc)),
                       status=409)
    return go_to_task(request, new)
