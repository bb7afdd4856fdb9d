"""The playbook pages: list, new, rename, a version (read, or edited as a draft), publish, discard, diff, files.

Everyone signed in reads playbooks; editors change them. A save sends the
changed section (or the whole draft, as YAML) to `draft_update()`, which
validates the whole spec and writes nothing on an error: the form comes
back (400) with each error beside its field (or its line). A published
version is frozen: its page has no forms, and a change sent to it answers
409 with the service's words.

Publish and discard each have a confirmation (their GET): what changes
from the latest published version, and for publish the reasons it cannot
be (`publish_errors()`) and the last labelled rehearsal decided again
under the draft (`selectors_regression`). Their POST does it.
"""

from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from ticketagent.llm.clients import publish_fit
from ticketagent.playbooks import services as playbook_services
from ticketagent.playbooks.files import spec_to_yaml
from ticketagent.playbooks.spec import PlaybookInvalid
from ticketagent.services import ServiceError
from ticketagent.web.access import is_editor, login_required, render_page, require_editor
from ticketagent.web.playbook_forms import (
    EDITORS,
    EditorInvalid,
    NewPlaybookForm,
    PlaybookFileForm,
    RenameForm,
    section_editors,
)
from ticketagent.web.selectors import playbooks as selectors
from ticketagent.web.selectors.regression import version_regression


def _list_page(request, *, form=None, errors=(), status=200):
    return render_page(request, "playbooks/list.html", None, {
        "playbooks": selectors.playbooks_with_versions(), "form": form or PlaybookFileForm(), "errors": list(errors),
    }, status=status)


@login_required
@require_GET
def playbook_list(request):
    return _list_page(request)


@login_required
@require_POST
def playbook_import_view(request):
    """A playbook file becomes a new playbook's draft (or the draft of the playbook of its name), or nothing."""
    require_editor(request)
    form, errors, status = PlaybookFileForm(request.POST, request.FILES), [], 400
    if form.is_valid():
        try:
            version = playbook_services.playbook_import(data=form.spec_data(), user=request.user,
                                                        publish=form.cleaned_data["publish"],
                                                        fits=publish_fit() if form.cleaned_data["publish"] else None)
        except PlaybookInvalid as exc:
            errors = exc.errors
        except ServiceError as exc:
            errors, status = [str(exc)], 409
        else:
            return redirect("playbook-version", version.pk)
    return _list_page(request, form=form, errors=errors, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def playbook_new(request):
    """A new playbook: empty, or a copy of a version; its v1 draft opens. A name taken or empty creates nothing."""
    require_editor(request)
    versions = selectors.start_choices()
    form, errors = NewPlaybookForm(request.POST or None, versions=versions), []
    if request.method == "POST" and form.is_valid():
        try:
            version = playbook_services.playbook_new(name=form.cleaned_data["name"],
                                                     copy_of=form.cleaned_data["start"], user=request.user)
        except PlaybookInvalid as exc:
            errors = exc.errors
        else:
            return redirect("playbook-version", version.pk)
    return render_page(request, "playbooks/new.html", None, {"form": form, "errors": errors},
                       status=400 if request.method == "POST" else 200)


@login_required
@require_GET
def playbook_detail(request, pk):
    return _playbook_page(request, selectors.playbook_with_versions(pk))


def _playbook_page(request, playbook, *, rename=None, errors=(), status=200):
    return render_page(request, "playbooks/playbook.html", None, {
        "playbook": playbook, "rename_form": rename or RenameForm(initial={"name": playbook.name}),
        "rename_errors": list(errors)}, status=status)


@login_required
@require_POST
def playbook_rename_view(request, pk):
    """Another name for the playbook (and its draft); a name taken or empty changes nothing (400)."""
    require_editor(request)
    playbook = selectors.playbook_with_versions(pk)
    form, errors = RenameForm(request.POST), []
    if form.is_valid():
        try:
            playbook_services.playbook_rename(playbook_id=playbook.pk, name=form.cleaned_data["name"])
        except PlaybookInvalid as exc:
            errors = exc.errors
        else:
            return redirect(reverse("playbook", args=[playbook.pk]) + "?renamed=1")
    return _playbook_page(request, playbook, rename=form, errors=errors, status=400)


@login_required
@require_POST
def draft_open_view(request, pk):
    """Edit: the playbook's open draft, or a new one copied from its latest version."""
    require_editor(request)
    playbook = selectors.playbook_with_versions(pk)
    draft = playbook_services.draft_open(playbook_id=playbook.pk, user=request.user)
    return redirect("playbook-version", draft.pk)


@login_required
@require_GET
def playbook_diff(request, pk):
    playbook = selectors.playbook_with_versions(pk)
    before, after = selectors.diff_pair(playbook, request.GET.get("a"), request.GET.get("b"))
    return render_page(request, "playbooks/diff.html", None, {
        "playbook": playbook, "before": before, "after": after, "changes": selectors.version_diff(before, after),
    })


def _version_page(request, version, *, bound=None, section="", page_error="", saved="", status=200):
    """The version page, or (htmx, after a save) the section that was saved; `bound` is the posted editor
    with its errors, `section` the one a save or its error is about."""
    spec = playbook_services.version_spec(version)
    editable = version.is_draft and is_editor(request.user)
    editors = section_editors(spec, bound) if editable else {}
    context = {"version": version, "playbook": version.playbook, "spec": spec, "editable": editable,
               "draft": selectors.playbook_draft(version.playbook),
               "page_error": page_error, "error_section": section if page_error else "",
               "saved": saved or request.GET.get("saved", ""),
               "editors": editors}
    return render_page(request, "playbooks/version.html", f"section-{section}" if section else None, context,
                       status=status)


@login_required
@require_GET
def version_detail(request, pk):
    """A version, readable by everyone (a draft editable by editors)."""
    return _version_page(request, selectors.version_or_404(pk))


@login_required
@require_POST
def version_edit(request, pk, section: str):
    """One section's save: the form read, `draft_update()` with what changed, the page or the section back.
    400 with every error beside its field and nothing saved; 409 for a version that is not a draft."""
    require_editor(request)
    version = selectors.version_or_404(pk)
    editor = None
    try:
        playbook_services.version_require_draft(version)
        editor = EDITORS[section](playbook_services.version_spec(version), request.POST)
        playbook_services.draft_update(version_id=version.pk, changes=editor.changes(), user=request.user)
    except EditorInvalid:
        return _version_page(request, version, bound=editor, section=section, status=400)
    except PlaybookInvalid as exc:
        editor.place(exc.errors)
        return _version_page(request, version, bound=editor, section=section, status=400)
    except ServiceError as exc:
        return _version_page(request, version, section=section, page_error=str(exc), status=409)
    if not request.htmx:
        return redirect(reverse("playbook-version", args=[version.pk]) + f"?saved={section}#{section}")
    version.refresh_from_db()
    return _version_page(request, version, section=section, saved=section)


def _confirm_page(request, version, action: str, *, errors=(), status=200):
    """The confirmation of publishing or discarding a draft: what changes from the latest published version;
    for publish, why it cannot be (its spec's errors, `publish_errors()`) and the regression."""
    base = selectors.draft_base(version)
    context = {"version": version, "playbook": version.playbook, "action": action, "base": base,
               "changes": selectors.version_diff(base, version) if base else [], "errors": list(errors)}
    if action == "publish":
        if not errors:
            try:
                spec = playbook_services.version_spec(version)
                context["errors"] = playbook_services.publish_errors(version, spec, publish_fit())
            except PlaybookInvalid as exc:
                context["errors"] = exc.errors
        context["regression"] = version_regression(version)
    return render_page(request, "playbooks/confirm.html", None, context, status=status)


def _confirmed(request, pk, action: str, do):
    """GET: the confirmation; POST: `do(version)`, then to `where` it sends; a refusal back on the confirmation."""
    require_editor(request)
    version = selectors.version_or_404(pk)
    try:
        playbook_services.version_require_draft(version)
    except ServiceError as exc:
        return _version_page(request, version, page_error=str(exc), status=409)
    if request.method == "GET":
        return _confirm_page(request, version, action)
    try:
        return do(version)
    except PlaybookInvalid as exc:
        return _confirm_page(request, version, action, errors=exc.errors, status=400)
    except ServiceError as exc:
        return _confirm_page(request, version, action, errors=[str(exc)], status=409)


@login_required
@require_http_methods(["GET", "POST"])
def version_publish(request, pk):
    """Publish the draft (freeze it, with its hash; a further edit opens a new draft), after its confirmation."""
    def publish(version):
        playbook_services.version_publish(version_id=version.pk, user=request.user, fits=publish_fit())
        return redirect("playbook-version", version.pk)

    return _confirmed(request, pk, "publish", publish)


@login_required
@require_http_methods(["GET", "POST"])
def version_discard(request, pk):
    """Throw the draft away, after its confirmation; to the playbook's page."""
    def discard(version):
        playbook_services.draft_discard(version_id=version.pk)
        return redirect("playbook", version.playbook_id)

    return _confirmed(request, pk, "discard", discard)


@login_required
@require_GET
def version_export(request, pk):
    """The version as a YAML file (a download), as `manage.py playbook export` writes it."""
    version = selectors.version_or_404(pk)
    response = HttpResponse(spec_to_yaml(playbook_services.version_spec(version)),
                            content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{selectors.version_file_name(version)}"'
    return response
