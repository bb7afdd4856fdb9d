"""What every view shares: login (htmx-aware), the operator check, rendering a page or its fragment."""

import functools

from django.contrib.auth import decorators as auth_decorators
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse

from ticketagent.models import Task
from ticketagent.web.live import live_digest

OPERATORS = "operators"
EDITORS = "editors"
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


def require_operator(request):
    if not is_operator(request.user):
        raise PermissionDenied("operators only: viewers may look but not act")


def is_editor(user) -> bool:
    """Who may change playbooks: editors (and superusers). Everyone signed in may read them."""
    return user.is_authenticated and (user.is_superuser or user.groups.filter(name=EDITORS).exists())


def require_editor(request):
    if not is_editor(request.user):
        raise PermissionDenied("editors only: playbooks are changed by editors; everyone else may read them")


def actor(request) -> str:
    return request.user.get_username()


def task_or_404(pk) -> Task:
    return get_object_or_404(Task, pk=pk)


def go_to_task(request, task: Task):
    """After creating a task: its page (htmx follows HX-Redirect, a form a 302)."""
    url = reverse("task-detail", args=[task.pk])
    if request.htmx:
        response = HttpResponse(status=204)
        response["HX-Redirect"] = url
        return response
    return redirect(url)


def render_page(request, template, fragment, context, status=200, *, live=None):
    """The page, or with htmx its `fragment`. `live`: the page's polled fragment, whose digest the whole page
    carries in its poll (web/live.py), so the first poll after a page load finds nothing new."""
    name = f"{template}#{fragment}" if request.htmx and fragment else template
    context.setdefault("can_act", is_operator(request.user))
    context.setdefault("can_edit", is_editor(request.user))
    if live and name == template:
        context["live_mark"] = live_digest(render_to_string(f"{template}#{live}", context, request))
    return render(request, name, context, status=status)
