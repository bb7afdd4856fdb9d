"""The upload page: a file or a helpdesk query becomes a task, or every error is listed and nothing is created."""

from django import forms
from django.conf import settings

from ticketagent.models import NotifyChannel
from ticketagent.playbooks.models import PlaybookVersion, VersionStatus
from ticketagent.playbooks.services import version_default
from ticketagent.services import ServiceError
from ticketagent.services.budget import HOW as BUDGET_HELP
from ticketagent.services.budget import budget_parse
from ticketagent.services.imports import task_import
from ticketagent.services.upload import UploadRejected, task_upload
from ticketagent.sources import SourceError
from ticketagent.sources.helpdesk import helpdesk_summary
from ticketagent.web.access import go_to_task, login_required, render_page, require_operator


class VersionChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj) -> str:
        return obj.label


class TaskOptions(forms.Form):
    name = forms.CharField(required=False, max_length=200)
    playbook_version = VersionChoiceField(queryset=PlaybookVersion.objects.none(), required=False, empty_label=None,
                                          label="Playbook version",
                                          help_text="The published playbook version the agent follows.")
    rehearsal = forms.BooleanField(required=False, label="Rehearsal (run the model steps and the rules, send nothing)",
                                   help_text="Its report shows what would happen to each ticket; go live from it.")
    notify_channel = forms.ChoiceField(choices=NotifyChannel.choices, initial=NotifyChannel.HELPDESK)
    allow_auto_close = forms.BooleanField(required=False, label="Allow automatic close",
                                          help_text="Otherwise every close waits for an operator's approval.")
    failure_threshold = forms.IntegerField(min_value=1, max_value=1000, initial=3, required=False,
                                           help_text="Consecutive failed items that suspend the task.")
    budget = forms.CharField(required=False, max_length=40, label="Budget (optional)",
                             help_text=f"For the model calls: {BUDGET_HELP}. Reaching it suspends the task. It is "
                                       f"checked before each model call, so each item already calling the model "
                                       f"then may pass it by that one step's cost.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.fields["playbook_version"]
        field.queryset = (PlaybookVersion.objects.filter(status=VersionStatus.PUBLISHED).select_related("playbook")
                          .order_by("playbook__name", "-number"))
        try:
            field.initial = version_default()
        except ServiceError:  # the first playbook has no published version yet: the operator picks one
            field.initial = None

    def options(self) -> dict:
        return {key: self.cleaned_data[key] for key in ("name", "notify_channel", "allow_auto_close",
                                                       "failure_threshold", "playbook_version", "rehearsal",
                                                       "budget")}

    def clean_budget(self):
        try:
            return budget_parse(self.cleaned_data["budget"])
        except ServiceError as exc:
            raise forms.ValidationError(str(exc).removeprefix("budget: ")) from None


class UploadForm(TaskOptions):
    file = forms.FileField(allow_empty_file=True,
                           help_text="CSV or JSONL; columns ticket_id, customer_email, subject, body "
                                     "(+ customer_name, priority, language, metadata)")
    field_order = ["file", "name", "playbook_version", "rehearsal", "notify_channel", "allow_auto_close",
                   "failure_threshold", "budget"]


class ImportForm(TaskOptions):
    query = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))
    limit = forms.IntegerField(min_value=1, max_value=50_000, initial=500, required=False,
                               help_text="At most this many tickets.")
    field_order = ["query", "limit", "name", "playbook_version", "rehearsal", "notify_channel", "allow_auto_close",
                   "failure_threshold", "budget"]


def _context(source: str, **extra) -> dict:
    return {"source": source, "helpdesk": helpdesk_summary(), "errors": [], **extra}


@login_required
def upload(request):
    if request.method != "POST":
        source = "helpdesk" if request.GET.get("from") == "helpdesk" else "file"
        return render_page(request, "tasks/upload.html", None,
                           _context(source, form=UploadForm(), import_form=ImportForm()))
    require_operator(request)
    form, errors = UploadForm(request.POST, request.FILES), []
    if form.is_valid():
        f = form.cleaned_data["file"]
        # The request body is capped before it is read (middleware); the
        # parser checks the file's own cap first, with the same words as
        # `manage.py upload`.
        try:
            task = task_upload(data=f.read(), filename=f.name, user=request.user, **form.options())
        except UploadRejected as exc:
            errors = [str(e) for e in exc.errors]
        except ServiceError as exc:
            errors = [str(exc)]
        else:
            return go_to_task(request, task)
    return render_page(request, "tasks/upload.html", "upload-form",
                       _context("file", form=form, import_form=ImportForm(), errors=errors), status=400)


@login_required
def upload_from_helpdesk(request):
    """A task from a helpdesk query (GET shows the upload page on its helpdesk tab)."""
    if request.method != "POST":
        return render_page(request, "tasks/upload.html", None,
                           _context("helpdesk", form=UploadForm(), import_form=ImportForm()))
    require_operator(request)
    form, errors = ImportForm(request.POST), []
    if form.is_valid():
        try:
            task = task_import(query=form.cleaned_data["query"], user=request.user,
                               limit=form.cleaned_data["limit"] or settings.UPLOAD_MAX_ROWS, **form.options())
        except UploadRejected as exc:
            errors = [str(e) for e in exc.errors]
        except (ServiceError, SourceError) as exc:
            errors = [str(exc)]
        else:
            return go_to_task(request, task)
    return render_page(request, "tasks/upload.html", "import-form",
                       _context("helpdesk", form=UploadForm(), import_form=form, errors=errors), status=400)
