"""The authorization matrix: every URL pattern x {anonymous, viewer, operator,
staff} x {GET, POST}, generated from the URL configuration.

The patterns are walked from `get_resolver().url_patterns` (includes and
namespaces too), their parameters filled with real objects, and each request's
status compared with EXPECT. A pattern that EXPECT does not list fails the
test, so a new view cannot ship without someone deciding who may use it.

The Django admin and the RQ dashboard (namespaces "admin", "django_rq") follow
one rule, checked on each of their patterns: staff only; everyone else is sent
to the admin login (the RQ JSON/Prometheus endpoints answer 401 instead).
Staff requests there are GET only: a POST would act on the real queue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve

from ticketagent.models import ItemStatus
from ticketagent.services.rehearsal import rehearsal_rerun

from ..factories import make_task

pytestmark = [pytest.mark.django_db]

ROLES = ("anonymous", "viewer", "operator", "editor", "staff")
LOGIN = "login"  # a redirect to /accounts/login/?next=<the url>
ADMIN_LOGIN = "admin-login"  # a redirect to /admin/login/?next=<the url>

# name -> {role: (GET, POST)}. "viewer+" rows list viewer, operator, editor and staff alike. An editor changes
# playbooks and is no operator; staff is a superuser (every role).
_PAGE = {"anonymous": (LOGIN, LOGIN), "viewer+": (200, 405)}


def _action(operator_post):
    return {"anonymous": (LOGIN, LOGIN), "viewer": (405, 403), "operator": (405, operator_post),
            "editor": (405, 403), "staff": (405, operator_post)}


def _edit(editor_post, get=405):
    """A change to a playbook: editors (and superusers) only."""
    return {"anonymous": (LOGIN, LOGIN), "viewer": (get, 403), "operator": (get, 403), "editor": (get, editor_post),
            "staff": (get, editor_post)}


# a playbook form only editors see (a GET is the form) and a change confirmed first (GET: the confirmation)
_EDITORS_ONLY_FORM = {"anonymous": (LOGIN, LOGIN), "viewer": (403, 403), "operator": (403, 403), "editor": (200, 400),
                      "staff": (200, 400)}
_CONFIRMED = {"anonymous": (LOGIN, LOGIN), "viewer": (403, 403), "operator": (403, 403), "editor": (409, 409),
              "staff": (409, 409)}

EXPECT: dict[str, dict] = {
    # route (as in urls.py)                 expectations; POSTs carry no data (the views' own validation answers)
    "": _PAGE,                                                   # tasks
    "upload/": {"anonymous": (LOGIN, LOGIN), "viewer": (200, 403), "operator": (200, 400), "editor": (200, 403),
                "staff": (200, 400)},
    "upload/helpdesk/": {"anonymous": (LOGIN, LOGIN), "viewer": (200, 403), "operator": (200, 400),
                         "editor": (200, 403), "staff": (200, 400)},  # a task from a helpdesk query
    "tasks/<int:pk>/": _PAGE,
    "tasks/<int:pk>/progress/": _PAGE,
    "tasks/<int:pk>/events.jsonl": _PAGE,
    "tasks/<int:pk>/dry-run/": _PAGE,
    "tasks/<int:pk>/resume/": _action(302),
    "tasks/<int:pk>/pause/": _action(302),
    "tasks/<int:pk>/cancel/": _action(302),
    "tasks/<int:pk>/clone/": _action(302),                       # a new task from the unfinished items
    "tasks/<int:pk>/move-version/": _action(409),                # no version given
    "tasks/<int:pk>/rehearsal/": _PAGE,
    "tasks/<int:pk>/rehearsal/rerun/": _action(400),             # no version given
    "tasks/<int:pk>/compare/<int:other>/": _PAGE,                # a rehearsal and its rerun
    "tasks/<int:pk>/go-live/": _action(400),
    "tasks/<int:pk>/rehearsal/export.csv": _PAGE,                # the rehearsal's tickets as CSV
    "playbooks/": _PAGE,
    "playbooks/import/": _edit(400),                             # no file given
    "playbooks/new/": _EDITORS_ONLY_FORM,                        # POST without a name: 400
    "playbooks/<int:pk>/rename/": _edit(400),                    # no name given
    "playbooks/<int:pk>/": _PAGE,
    "playbooks/<int:pk>/draft/": _edit(302),                     # opens the draft (a copy of the latest version)
    "playbooks/<int:pk>/diff/": _PAGE,
    "playbooks/versions/<int:pk>/": _PAGE,
    "playbooks/versions/<int:pk>/guidance/": _edit(409),         # the sample is published: it never changes
    "playbooks/versions/<int:pk>/categories/": _edit(409),
    "playbooks/versions/<int:pk>/rules/": _edit(409),
    "playbooks/versions/<int:pk>/reply/": _edit(409),
    "playbooks/versions/<int:pk>/articles/": _edit(409),
    "playbooks/versions/<int:pk>/publish/": _CONFIRMED,          # GET: its confirmation; the sample is published
    "playbooks/versions/<int:pk>/discard/": _CONFIRMED,
    "playbooks/versions/<int:pk>/yaml/": _edit(409),
    "playbooks/versions/<int:pk>/export.yaml": _PAGE,
    "items/<int:pk>/": _PAGE,
    "items/<int:pk>/approval/": _action(409),                    # no decision given
    "items/approvals/": _action(409),                            # nothing selected, no decision given
    "items/<int:pk>/retry/": _action(409),                       # the item is not failed
    "items/<int:pk>/skip/": _action(409),                        # no reason given
    "search/": _PAGE,                                            # tickets, customers and tasks across tasks
    "review/": _PAGE,
    "attention/": _PAGE,                                         # the header's counts (polled)
    "workers/": _PAGE,                                           # workers, queue depth, leases: read-only
    "effects/<int:pk>/reconcile/": _action(302),
    "effects/<int:pk>/review/": _action(409),                    # no verdict given
    "ledger/actions/": _PAGE,
    "metrics": {"anonymous": (401, 405), "viewer+": (200, 405)},  # 401: login or METRICS_TOKEN
    "favicon.ico": {"anonymous": (200, 405), "viewer+": (200, 405)},  # browsers ask for it on their own
    "healthz": {"anonymous": (200, 405), "viewer+": (200, 405)},  # liveness: no login, nothing private
    "readyz": {"anonymous": (200, 405), "viewer+": (200, 405)},  # readiness: database, Redis, migrations
    "accounts/login/": {"anonymous": (200, 200), "viewer+": (200, 200)},  # POST without credentials: the form again
    "accounts/logout/": {"anonymous": (405, 302), "viewer+": (405, 302)},
}

STAFF_ONLY_NAMESPACES = ("admin", "django_rq")
# Within them, the patterns with another rule for non-staff users: (namespace, url name) -> (GET, POST)
_EVERYONE = ("anonymous", "viewer", "operator", "editor")
_TOKEN_API = dict.fromkeys(_EVERYONE, (401, 401))  # django_rq's JSON and Prometheus views: staff or RQ_API_TOKEN
NON_STAFF_EXCEPTIONS = {
    ("admin", "login"): dict.fromkeys(_EVERYONE, (200, 200)),
    ("admin", "logout"): dict.fromkeys(_EVERYONE, ("/admin/", "/admin/")),  # to the index, i.e. on to the login
    ("django_rq", "home_json"): _TOKEN_API,
    ("django_rq", "metrics"): _TOKEN_API,
    ("admin", "django_rq_home_json"): _TOKEN_API,  # the same views, mounted again by django_rq's admin entry
    ("admin", "django_rq_metrics"): _TOKEN_API,
}

SAMPLE_VALUES = {
    # parameters of third-party patterns: any value that resolves (missing objects are fine: the
    # answer for non-staff must not depend on them)
    "app_label": None, "model_name": None, "object_id": "999999", "content_type_id": "999999", "url": "no-such-page/",
    "queue_index": "0", "job_id": "no-such-job", "result_id": "no-such-result", "key": "no-such-worker",
    "scheduler_index": "0", "connection_index": "0", "scheduler_name": "no-such-scheduler",
    "cron_job_name": "no-such-job", "token": "notthetoken",
}
# the object a route's <pk> names: the first key the route starts with (a rehearsal's pages take a rehearsal)
OBJECT_FOR_ROUTE = {"tasks/<int:pk>/rehearsal/": "rehearsal", "tasks/<int:pk>/compare/": "rehearsal",
                    "tasks/<int:pk>/go-live/": "rehearsal", "tasks/": "task", "items/": "item", "effects/": "effect", "playbooks/versions/": "version",
                    "playbooks/": "playbook"}


@dataclass(frozen=True)
class Pattern:
    route: str  # the full route, pieces joined as written (regex pieces as regex)
    namespace: str
    name: str | None
    pieces: tuple  # (kind, text): kind "route" or "regex"


def walk(patterns=None, pieces=(), namespace=""):
    for p in get_resolver().url_patterns if patterns is None else patterns:
        kind = "regex" if p.pattern.__class__.__name__ == "RegexPattern" else "route"
        piece = (kind, str(p.pattern))
        if isinstance(p, URLResolver):
            ns = ":".join(filter(None, [namespace, p.namespace])) if p.namespace else namespace
            yield from walk(p.url_patterns, (*pieces, piece), ns)
        elif isinstance(p, URLPattern):
            all_pieces = (*pieces, piece)
            yield Pattern("".join(t for _, t in all_pieces), namespace, p.name, all_pieces)


def sample_path(pattern: Pattern, objects: dict) -> str:
    out = []
    for kind, text in pattern.pieces:
        if kind == "route":
            def convert(m):
                name = m.group(2)
                if name == "pk":
                    return str(objects[next(v for k, v in OBJECT_FOR_ROUTE.items() if pattern.route.startswith(k))])
                if name == "other":  # the rehearsal compared with: a rerun of it
                    return str(objects["rerun"])
                return SAMPLE_VALUES.get(name) or "999999"

            out.append(re.sub(r"<(?:(\w+):)?(\w+)>", convert, text))
        else:
            def group(m):
                value = SAMPLE_VALUES.get(m.group(1))
                return value if value is not None else m.group(2).split("|")[0]

            rx = re.sub(r"\(\?P<(\w+)>((?:[^()]|\([^()]*\))*)\)\??", group, text)
            out.append(rx.lstrip("^").rstrip("$").replace("/?", "/").replace("\\.", ".").replace("\\", ""))
    return "/" + "".join(out)


def expected(pattern: Pattern, role: str) -> tuple | None:
    """(GET, POST) for this role; None: not exercised."""
    top = pattern.namespace.split(":")[0]
    if top in STAFF_ONLY_NAMESPACES:
        if role == "staff":
            return ("staff", None)
        rule = NON_STAFF_EXCEPTIONS.get((top, pattern.name))
        return rule[role] if rule else (ADMIN_LOGIN, ADMIN_LOGIN)
    rule = EXPECT[pattern.route]
    return rule.get(role) or rule["viewer+"]


@pytest.fixture
def world(unknown_effect):
    """A fresh set of real objects (task, item, unknown effect) for each role's requests."""

    def make():
        task = make_task(2)
        item = task.items.order_by("row").first()
        task.items.filter(pk=item.pk).update(status=ItemStatus.WAITING_APPROVAL)
        rehearsal = make_task(2, rehearsal=True)
        rerun = rehearsal_rerun(task_id=rehearsal.pk, version=rehearsal.playbook_version)
        return {"task": task.pk, "item": item.pk, "effect": unknown_effect().pk, "rehearsal": rehearsal.pk,
                "rerun": rerun.pk, "version": task.playbook_version_id, "playbook": task.playbook_version.playbook_id}

    return make


def test_every_url_pattern_has_an_expectation():
    missing = [p.route for p in walk()
               if p.namespace.split(":")[0] not in STAFF_ONLY_NAMESPACES and p.route not in EXPECT]
    assert not missing, (f"URL patterns without an authorization decision: {missing}; add each to EXPECT in "
                         f"{__file__} with the status every role should get")
    stale = set(EXPECT) - {p.route for p in walk()}
    assert not stale, f"EXPECT lists routes that no longer exist: {stale}"
    seen = {(p.namespace.split(":")[0], p.name) for p in walk()}
    assert set(NON_STAFF_EXCEPTIONS) <= seen, set(NON_STAFF_EXCEPTIONS) - seen


def _login_redirect(response, login_path: str, path: str) -> bool:
    from urllib.parse import quote, unquote

    location = response.get("Location", "")
    return response.status_code == 302 and location.startswith(login_path + "?next=") and \
        unquote(location.split("?next=", 1)[1]) in (path, unquote(quote(path)))


def _check(response, want, path: str) -> str | None:
    """None when the response is what `want` says, else a description."""
    if want == LOGIN:
        ok = _login_redirect(response, "/accounts/login/", path)
    elif want == ADMIN_LOGIN:
        ok = _login_redirect(response, "/admin/login/", path)
    elif isinstance(want, str) and want.startswith("/"):
        ok = response.status_code == 302 and response.get("Location") == want
    elif want == "staff":
        # the view itself answered: not sent to a login, not refused for want of a login. (Its own answer
        # may be 403 -- read-only admin models refuse add/delete -- or a third-party error for the
        # made-up job and worker ids; that is not about who may get in.)
        ok = response.status_code != 401 and not (
            response.status_code == 302 and "/login/" in response.get("Location", ""))
    else:
        ok = response.status_code == want
    if ok:
        return None
    return f"{response.status_code} {response.get('Location', '')}".strip()


def test_the_matrix(world, alice, bob, staff, queue, settings):
    settings.RATE_LIMIT_ACTIONS_PER_MINUTE = 100_000  # the matrix itself is hundreds of POSTs a minute
    editor = User.objects.create_user("erin", password="erin-pass-123")
    editor.groups.add(Group.objects.get_or_create(name="editors")[0])
    users = {"anonymous": None, "viewer": bob, "operator": alice, "editor": editor, "staff": staff}
    patterns = list(walk())
    assert len(patterns) > 40  # ours, the admin's and the RQ dashboard's
    failures, checked = [], 0
    for role in ROLES:
        objects = world()
        client = Client(raise_request_exception=False)
        user = users[role]
        if user is not None:
            client.force_login(user)
        for pattern in patterns:
            want = expected(pattern, role)
            if want is None:
                continue
            path = sample_path(pattern, objects)
            match = resolve(path)
            if (match.namespace, match.url_name) != (pattern.namespace, pattern.name):
                # a pattern shadowed by an earlier one of the same site (django_rq's admin dashboard
                # entry) cannot be reached; the one that answers is checked by the same rule
                assert match.namespace.split(":")[0] in STAFF_ONLY_NAMESPACES and \
                    match.namespace.split(":")[0] == pattern.namespace.split(":")[0], \
                    f"sample {path} resolves to {match.view_name}, not {pattern.route}"
            for method, want_status in zip(("GET", "POST"), want, strict=True):
                if want_status is None:
                    continue
                response = client.get(path) if method == "GET" else client.post(path)
                checked += 1
                problem = _check(response, want_status, path)
                if problem:
                    failures.append(f"{role:9} {method:4} {path} ({pattern.namespace or 'app'}:{pattern.name}): "
                                    f"expected {want_status}, got {problem}")
                if pattern.name == "logout" and user is not None:
                    client.force_login(user)  # the next request is made by the same role again
    assert not failures, "\n".join(failures)
    assert checked > 250


def test_metrics_take_a_bearer_token_instead_of_a_login(client, settings):
    settings.METRICS_TOKEN = "metrics-token-for-the-test"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    response = client.get("/metrics", headers={"Authorization": "Bearer metrics-token-for-the-test"})
    assert response.status_code == 200 and b"ticketagent_unknown_effects" in response.content


def test_the_sample_paths_cover_regex_and_route_patterns():
    """A canary for the walker: includes, namespaces and regex patterns are all seen."""
    patterns = list(walk())
    kinds = {kind for p in patterns for kind, _ in p.pieces}
    assert kinds == {"route", "regex"}
    assert {"admin", "django_rq"} <= {p.namespace for p in patterns}
    assert any(p.name == "task-resume" for p in patterns)
