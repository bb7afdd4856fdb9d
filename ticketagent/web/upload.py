"""The upload page: a CSV or JSONL batch becomes a task, or the page lists every error and nothing is created."""

from django import forms

from ticketagent.models import NotifyChannel
from ticketagent.services.upload import UploadRejected, task_upload
from ticketagent.web.access import go_to_task, login_required, render_page, require_operator


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
        require_operator(request)
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
                return go_to_task(request, task)
    else:
        form = UploadForm()
    status = 400 if errors or form.errors else 200
    return render_page(request, "tasks/upload.html", "upload-form", {"form": form, "errors": errors}, status=status)
