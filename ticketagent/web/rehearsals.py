"""The rehearsal pages: a rehearsal's report (per ticket, distributions, agreement), compare two, go live.

The report is one page. Its per-ticket table is a GET form: the tickets an
operator marks to exclude travel with the page number, so marks made on
one page survive a move to the next; its filter (agreement with the
expected labels, category, held or not) narrows the table and what goes
live; "Go live…" opens the confirmation (`?go_live=1`) with the filter
said and every excluded ticket named. The report also downloads as CSV. Going live is the POST of
that confirmation; "Compare with version" the POST of the rerun form. Every
page works without JavaScript; htmx swaps the table, the forms and the
progress of a rehearsal still running.
"""

from django import forms
from django.conf import settings
from django.core.paginator import Paginator
from django.http import Http404, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.utils.functional import SimpleLazyObject
from django.views.decorators.http import require_GET, require_POST

from ticketagent.models import ACTIVE_TASK_STATUSES, Task
from ticketagent.services import ServiceError
from ticketagent.services.rehearsal import rehearsal_rerun, task_go_live
from ticketagent.upload.parse import parse_batch
from ticketagent.web import selectors
from ticketagent.web.access import (
    HTMX_STOP_POLLING,
    go_to_task,
    is_operator,
    login_required,
    render_page,
    require_operator,
)
from ticketagent.web.rehearsal_export import rehearsal_csv_lines
from ticketagent.web.selectors import rehearsal as selectors_rehearsal

REPORT = "rehearsals/report.html"
MAX_EXCLUDED = 50_000


def _rehearsal_or_404(pk) -> Task:
    task = get_object_or_404(Task.objects.select_related("playbook_version__playbook",
                                                         "source_task__playbook_version__playbook"), pk=pk)
    if not task.rehearsal:
        raise Http404("this task is not a rehearsal")
    return task


def _ids(values) -> list[int]:
    """Item ids from a query string or a form (anything that is not one is left out)."""
    return sorted({int(v) for v in values[:MAX_EXCLUDED] if str(v).isdigit()})


# --------------------------------------------------------------------------- forms


class CompareForm(forms.Form):
    version = forms.TypedChoiceField(coerce=int, label="Compare with version",
                                     help_text="The same tickets are rehearsed again on that version, as a new "
                                               "rehearsal; nothing is sent.")

    def __init__(self, *args, versions, **kwargs):
        super().__init__(*args, **kwargs)
        self.versions = {v.pk: v for v in versions}
        self.fields["version"].choices = [(pk, v.label) for pk, v in self.versions.items()]

    def clean_version(self):
        return self.versions[self.cleaned_data["version"]]


class TicketFilter(forms.Form):
    """Which decided tickets the table shows and go live: every filter given must hold."""

    agreement = forms.ChoiceField(required=False, label="Agreement", choices=[
        ("", "any"), *selectors_rehearsal.AGREEMENT_FILTERS.items()])
    category = forms.ChoiceField(required=False, label="Category")
    held = forms.ChoiceField(required=False, label="Held for approval",
                             choices=[("", "any"), *selectors_rehearsal.HELD_FILTERS.items()])

    def __init__(self, data, *, task: Task):
        super().__init__(data)
        self.task = task
        self.fields["category"].choices = [("", "any")] + [(c, c) for c in selectors_rehearsal.categories_given(task)]

    def values(self) -> dict:
        """The filters given (those that are not one of the choices are left out)."""
        if not self.is_valid():
            return {name: "" for name in self.fields}
        return dict(self.cleaned_data)

    def said(self) -> str:
        """The filter in words: "category billing, agrees with every expected label"."""
        given = self.values()
        parts = [f"category {given['category']}" if given["category"] else "",
                 selectors_rehearsal.AGREEMENT_FILTERS.get(given["agreement"], ""),
                 selectors_rehearsal.HELD_FILTERS.get(given["held"], "")]
        return ", ".join(p for p in parts if p)

    def matching(self) -> list[int] | None:
        return selectors_rehearsal.items_matching(self.task, **self.values())


class ItemIdsField(forms.Field):
    """Item ids, one hidden input each (the tickets excluded from going live)."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value):
        values = [str(v) for v in value or ()]
        bad = [v for v in values if not v.isdigit()]
        if bad:
            raise forms.ValidationError(f"{bad[0]!r} is not an item id")
        return sorted({int(v) for v in values})


class GoLiveForm(forms.Form):
    exclude = ItemIdsField(required=False)
    file = forms.FileField(required=False, allow_empty_file=True, label="The tickets as they are now (optional)",
                           help_text="CSV or JSONL with the same columns as the upload, e.g. a fresh export: a "
                                     "ticket that changed since the rehearsal is decided again, the others go live "
                                     "with their rehearsed decisions.")
    name = forms.CharField(required=False, max_length=200, label="Name of the live task")

    def __init__(self, *args, task: Task, **kwargs):
        super().__init__(*args, **kwargs)
        self.task, self.rows, self.file_errors = task, None, []

    def clean_exclude(self):
        ids = self.cleaned_data["exclude"]
        known = set(self.task.items.filter(pk__in=ids).values_list("pk", flat=True))
        stray = [pk for pk in ids if pk not in known]
        if stray:
            raise forms.ValidationError(f"item {stray[0]} is not a ticket of this rehearsal")
        return ids

    def clean_file(self):
        f = self.cleaned_data["file"]
        if not f:
            return None
        result = parse_batch(f.read(), f.name, max_bytes=settings.UPLOAD_MAX_BYTES,
                             max_rows=settings.UPLOAD_MAX_ROWS)
        if not result.ok:
            self.file_errors = [str(e) for e in result.errors] or ["file: it holds no tickets"]
            raise forms.ValidationError("the file was rejected")
        rehearsed = set(self.task.items.values_list("ticket_id", flat=True))
        new = [row for row in result.rows if row.ticket_id not in rehearsed]
        if new:
            self.file_errors = [f"row {row.row}: ticket {row.ticket_id} was not rehearsed: rehearse it first, or "
                                f"leave it out of the file" for row in new[:50]]
            raise forms.ValidationError("the file has tickets the rehearsal did not have")
        self.rows = result.rows
        return f


# --------------------------------------------------------------------------- the report


def _report_context(request, task: Task, *, excluded=None, compare_form=None, go_live_form=None,
                    data=None) -> dict:
    """The report page: the summary (computed only if the template asks for it), a page of tickets (those the
    filter lets through), the exclusions carried from other pages, the compare form, and the go-live
    confirmation when asked for."""
    if excluded is None:
        excluded = _ids(request.GET.getlist("exclude"))
    ticket_filter = TicketFilter(data if data is not None else request.GET, task=task)
    only = ticket_filter.matching()
    if only is not None:
        kept = set(only)
        excluded = [pk for pk in excluded if pk in kept]
    items, rows = selectors_rehearsal.rehearsal_page(task, request.GET.get("page"), only=only)
    on_page = {row.item.pk for row in rows}
    source, reruns = selectors_rehearsal.rehearsal_relatives(task)
    active = task.status in ACTIVE_TASK_STATUSES
    can_go_live = is_operator(request.user) and not active
    if go_live_form is None and can_go_live and request.GET.get("go_live"):
        go_live_form = GoLiveForm(initial={"exclude": excluded}, task=task)
    named = selectors_rehearsal.items_named(task, excluded) if go_live_form else []
    return {
        "task": task, "items": items, "rows": rows, "excluded": excluded,
        "carried": [pk for pk in excluded if pk not in on_page],
        "summary": SimpleLazyObject(lambda: selectors_rehearsal.rehearsal_summary(task)),
        "progress": selectors.task_progress(task), "active": active, "can_go_live": can_go_live, "source": source,
        "reruns": reruns,
        "compare_form": compare_form or CompareForm(versions=selectors_rehearsal.compare_versions(task)),
        "go_live_form": go_live_form, "excluded_tickets": named, "live_count": items.paginator.count - len(named),
        "ticket_filter": ticket_filter, "filtered": only is not None,
    }


@login_required
@require_GET
def rehearsal_report(request, pk):
    """The report; with htmx, a page of the table (`#tickets`) or, while it runs, its progress (`?part=progress`)."""
    task = _rehearsal_or_404(pk)
    if request.htmx and request.GET.get("part") == "progress":
        return _progress_poll(request, task)
    return render_page(request, REPORT, "tickets", _report_context(request, task), live="progress")


def _progress_poll(request, task: Task):
    """The progress of a rehearsal still running: 204 while it shows what the page shows (web/live.py), 286 once
    it stopped."""
    active = task.status in ACTIVE_TASK_STATUSES
    response = render_page(request, REPORT, "progress", {
        "task": task, "progress": selectors.task_progress(task), "active": active, "finished_now": not active})
    if not active:
        response.status_code = HTMX_STOP_POLLING
    return response


@login_required
@require_POST
def rehearsal_rerun_view(request, pk):
    """Compare with version N: the same tickets rehearsed again on another published version; to its task page."""
    require_operator(request)
    task = _rehearsal_or_404(pk)
    form = CompareForm(request.POST, versions=selectors_rehearsal.compare_versions(task))
    if form.is_valid():
        try:
            new = rehearsal_rerun(task_id=task.pk, version=form.cleaned_data["version"], user=request.user)
        except ServiceError as exc:
            form.add_error(None, str(exc))
        else:
            return go_to_task(request, new)
    return render_page(request, REPORT, "compare-form", _report_context(request, task, compare_form=form),
                       status=400)


@login_required
@require_POST
def go_live_view(request, pk):
    """Go live: a live task from the rehearsed decisions, minus the excluded tickets; to its task page.
    Anything wrong is named on the confirmation and nothing is created."""
    require_operator(request)
    task = _rehearsal_or_404(pk)
    form = GoLiveForm(request.POST, request.FILES, task=task)
    ticket_filter = TicketFilter(request.POST, task=task)
    only = ticket_filter.matching()
    if not ticket_filter.is_valid():  # never "no filter, so every ticket" for a filter that was garbled
        form.add_error(None, "the filter is not one the report offers: " + "; ".join(
            f"{name}: {error}" for name, errors in ticket_filter.errors.items() for error in errors))
    if form.is_valid():
        exclude = form.cleaned_data["exclude"]
        if only is not None:  # the tickets the filter leaves out stay out
            exclude = sorted(set(exclude) | set(task.items.exclude(pk__in=only).values_list("pk", flat=True)))
        try:
            live = task_go_live(task_id=task.pk, exclude=exclude, rows=form.rows, user=request.user,
                                name=form.cleaned_data["name"])
        except ServiceError as exc:
            form.add_error(None, str(exc))
        else:
            return go_to_task(request, live)
    excluded = _ids(request.POST.getlist("exclude"))
    return render_page(request, REPORT, "go-live",
                       _report_context(request, task, excluded=excluded, go_live_form=form, data=request.POST),
                       status=400)


@login_required
@require_GET
def rehearsal_export(request, pk):
    """The report's tickets as a CSV download (rehearsal_export.py says what a row holds and leaves out)."""
    task = _rehearsal_or_404(pk)
    response = StreamingHttpResponse(rehearsal_csv_lines(task), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="rehearsal-{task.pk}.csv"'
    return response


# --------------------------------------------------------------------------- compare


@login_required
@require_GET
def rehearsal_compare(request, pk, other):
    """What changed, ticket by ticket, from rehearsal `pk` to rehearsal `other` (50 changed tickets a page)."""
    before, after = _rehearsal_or_404(pk), _rehearsal_or_404(other)
    comparison = selectors_rehearsal.rehearsals_compare(before, after)
    changes = Paginator(comparison.changes, selectors_rehearsal.PAGE_SIZE).get_page(request.GET.get("page"))
    return render_page(request, "rehearsals/compare.html", "changes",
                       {"comparison": comparison, "changes": changes, "before": before, "after": after})
