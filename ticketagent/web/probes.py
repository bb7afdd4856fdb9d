"""Liveness and readiness probes for load balancers and orchestrators, without login and without anything private.

* ``GET /healthz`` (liveness): 200 ``{"status": "alive"}`` while the process
  answers; it touches nothing else, so a database outage does not get every web
  process restarted.
* ``GET /readyz`` (readiness): 200 when the database answers, Redis answers and
  every migration this code knows is applied; otherwise 503 naming which check
  failed (``unreachable``, ``pending``) -- never an address, a version or an
  error text. ``workers`` is the number of RQ workers registered for the queue
  (informational: the web is ready without them; a worker's own readiness is
  ``manage.py worker-health``).

``ProbeMiddleware`` sits first in MIDDLEWARE and answers these two paths before
anything reads the Host header, the session or the HTTPS redirect: a load
balancer probing a web process by its address over plain HTTP gets the answer,
not 400 (ALLOWED_HOSTS) or 301 (SECURE_SSL_REDIRECT). The same views are URL
patterns too, for ``reverse()`` and the authorization matrix.
"""

from __future__ import annotations

import redis
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import JsonResponse
from django.views.decorators.http import require_safe

_migrations_applied = False  # once true it stays true for this process: nothing un-applies a migration


def _answer(payload: dict, status: int = 200) -> JsonResponse:
    response = JsonResponse(payload, status=status)
    response["Cache-Control"] = "no-store"
    return response


@require_safe
def healthz(request):
    return _answer({"status": "alive"})


def _database() -> str:
    try:
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except Exception:  # noqa: BLE001 - any failure means "not ready"; the details stay in the server's log
        return "unreachable"


def _migrations() -> str:
    global _migrations_applied
    if _migrations_applied:
        return "ok"
    try:
        executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception:  # noqa: BLE001
        return "unknown"
    _migrations_applied = not pending
    return "ok" if not pending else "pending"


def _redis() -> tuple[str, int | None]:
    """("ok", registered workers) or ("unreachable", None)."""
    from rq import Worker
    from rq.queue import Queue

    from ticketagent.scheduling.rqworker import is_alive, seconds_since_seen

    try:
        conn = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)
        conn.ping()
        registered = Worker.all(queue=Queue(settings.RQ_QUEUE, connection=conn))  # expired keys left out
        seen = seconds_since_seen(conn, [w.key for w in registered])
        return "ok", sum(1 for s in seen if is_alive(s))  # a killed worker's key outlives it: not counted
    except Exception:  # noqa: BLE001
        return "unreachable", None


@require_safe
def readyz(request):
    database = _database()
    migrations = _migrations() if database == "ok" else "unknown"
    redis_state, workers = _redis()
    ready = database == redis_state == migrations == "ok"
    return _answer({"status": "ready" if ready else "not ready", "database": database, "migrations": migrations,
                    "redis": redis_state, "workers": workers}, status=200 if ready else 503)


PROBES = {"/healthz": healthz, "/readyz": readyz}


class ProbeMiddleware:
    """Answers GET/HEAD /healthz and /readyz before any other middleware (see the module's docstring)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        probe = PROBES.get(request.path_info)
        if probe is not None and request.method in ("GET", "HEAD"):
            return probe(request)
        return self.get_response(request)
