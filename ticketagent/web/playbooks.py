"""The playbook pages: list, a version (read, or edited as a draft by editors), publish, diff, import and export.

Everyone signed in reads playbooks; editors change them. A save sends the
changed section to `draft_update()`, which validates the whole spec and
writes nothing on an error: the form comes back (400) with each error
beside its field. A published version is frozen: its page has no forms,
and a change sent to it answers 409 with the service's words.

A version's URL takes a POST too: it discards the draft (there is nothing
else a POST to a version could mean).
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
from ticketagent.web import selectors_playbooks as selectors
from ticketagent.web.access import is_editor, login_required, render_page, require_editor
from ticketagent.web.playbook_forms import (
    ArticleEditor,
    CategoriesEditor,
    EditorInvalid,
    GuidanceEditor,
    PlaybookFileForm,
    ReplyEditor,
    RulesEditor,
    section_editors,
)


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
@require_GET
def playbook_detail(request, pk):
    return render_page(request, "playbooks/playbook.html", None,
                       {"playbook": selectors.playbook_with_versions(pk)})


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
               "articles": list(zip(spec.articles, editors.get("article_list") or [None] * len(spec.articles),
                                    strict=True)),
               "editors": editors}
    return render_page(request, "playbooks/version.html", f"section-{section}" if section else None, context,
                       status=status)


@login_required
@require_http_methods(["GET", "POST"])
def version_detail(request, pk):
    """A version, readable by everyone (a draft editable by editors); a POST discards the draft."""
    version = selectors.version_or_404(pk)
    if request.method == "GET":
        return _version_page(request, version)
    require_editor(request)
    try:
        playbook_services.draft_discard(version_id=version.pk)
    except ServiceError as exc:
        return _version_page(request, version, page_error=str(exc), status=409)
    return redirect("playbook", version.playbook_id)


def _edit(request, pk, editor_class, **options):
    """One section's save: the form read, `draft_update()` with what changed, the page or the section back.
    400 with every error beside its field and nothing saved; 409 for a version that is not a draft."""
    require_editor(request)
    version = selectors.version_or_404(pk)
    section, editor = editor_class.section, None
    try:
        playbook_services.version_require_draft(version)
        editor = editor_class(playbook_services.version_spec(version), request.POST, **options)
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


@login_required
@require_POST
def version_guidance(request, pk):
    return _edit(request, pk, GuidanceEditor)


@login_required
@require_POST
def version_categories(request, pk):
    return _edit(request, pk, CategoriesEditor)


@login_required
@require_POST
def version_rules(request, pk):
    return _edit(request, pk, RulesEditor)


@login_required
@require_POST
def version_reply(request, pk):
    return _edit(request, pk, ReplyEditor)


@login_required
@require_POST
def version_article_add(request, pk):
    return _edit(request, pk, ArticleEditor)


@login_required
@require_POST
def version_article(request, pk, index):
    """Change the article at `index`, or remove it (`delete`)."""
    return _edit(request, pk, ArticleEditor, index=index)


@login_required
@require_POST
def version_publish(request, pk):
    """Freeze the draft: published, with its hash; a further edit opens a new draft."""
    require_editor(request)
    version = selectors.version_or_404(pk)
    try:
        playbook_services.version_publish(version_id=version.pk, user=request.user, fits=publish_fit())
    except (PlaybookInvalid, ServiceError) as exc:
        return _version_page(request, version, page_error=str(exc),
                             status=400 if isinstance(exc, PlaybookInvalid) else 409)
    return redirect("playbook-version", version.pk)


@login_required
@require_GET
def version_export(request, pk):
    """The version as a YAML file (a download), as `manage.py playbook export` writes it."""
    version = selectors.version_or_404(pk)
    response = HttpResponse(spec_to_yaml(playbook_services.version_spec(version)),
                            content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{selectors.version_file_name(version)}"'
    return response
