"""Production settings, checked the way a deployment starts: in a fresh process.

* DEBUG off without SECRET_KEY or ALLOWED_HOSTS (or with a weak key): start-up
  refuses, non-zero exit, a message naming the variable and what to do.
* DEBUG off with both set: `manage.py check --deploy --fail-level WARNING` is
  clean, and cookies are Secure and HttpOnly, HTTPS is enforced (redirect, HSTS
  including subdomains whenever HSTS is sent).
* DEBUG on (the `make run` default): plain http keeps working -- no redirect,
  no HSTS, cookies without the Secure flag.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

import pytest

from ..conftest import ROOT

PRINT_SETTINGS = (
    "import django, json; django.setup(); from django.conf import settings as s; "
    "print(json.dumps({k: getattr(s, k) for k in ("
    "'DEBUG', 'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', 'SESSION_COOKIE_HTTPONLY', 'CSRF_COOKIE_HTTPONLY', "
    "'SECURE_SSL_REDIRECT', 'SECURE_HSTS_SECONDS', 'SECURE_HSTS_INCLUDE_SUBDOMAINS', 'SECURE_CONTENT_TYPE_NOSNIFF', "
    "'X_FRAME_OPTIONS', 'ALLOWED_HOSTS', 'SECURE_REFERRER_POLICY', 'CONTENT_SECURITY_POLICY', "
    "'RATE_LIMIT_UPLOADS_PER_MINUTE', 'RATE_LIMIT_ACTIONS_PER_MINUTE', 'REQUEST_MAX_BYTES', "
    "'DATA_UPLOAD_MAX_MEMORY_SIZE')}))"
)


def _env(**overrides) -> dict:
    """The environment of a deployment: nothing inherited that settings read, except PATH and friends."""
    keep = {k: v for k, v in os.environ.items()
            if k in ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR", "REDIS_URL",
                     "DATABASE_URL")}
    env = {**keep, "DJANGO_SETTINGS_MODULE": "ticketagent.settings", "PYTHONUNBUFFERED": "1"}
    env.update({k: v for k, v in overrides.items() if v is not None})
    return env


def run(args: list[str], **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=_env(**env), capture_output=True, text=True,
                          timeout=60)


GOOD_KEY = secrets.token_urlsafe(50)


@pytest.mark.parametrize("missing, message", [
    ("SECRET_KEY", "SECRET_KEY must be set when DEBUG is off"),
    ("ALLOWED_HOSTS", "ALLOWED_HOSTS must be set when DEBUG is off"),
])
def test_debug_off_refuses_to_start_without_secret_key_or_allowed_hosts(missing, message):
    env = {"DEBUG": "false", "SECRET_KEY": GOOD_KEY, "ALLOWED_HOSTS": "agents.example.com"}
    env.pop(missing)
    proc = run(["manage.py", "check"], **env)
    assert proc.returncode != 0
    assert "ImproperlyConfigured" in proc.stderr and message in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("key", ["short-key", "insecure-local-development-key-do-not-use-in-production", "a" * 60])
def test_debug_off_refuses_a_weak_secret_key(key):
    proc = run(["manage.py", "check"], DEBUG="false", SECRET_KEY=key, ALLOWED_HOSTS="agents.example.com")
    assert proc.returncode != 0
    assert "SECRET_KEY is too weak for DEBUG off" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("key, reason", [
    ("ab" * 34 + "a", "it uses only 2 different characters (at least 5 are needed)"),
    ("short-key", "it is 9 characters long (at least 50 are needed)"),
    ("insecure-local-development-key-do-not-use-in-production", "it is the built-in development key"),
    ("django-insecure-" + "Kq7" * 17, "it starts with 'django-insecure-'"),
])
def test_a_weak_secret_key_is_refused_with_the_reason(key, reason):
    """The message names what is wrong with this key, not a rule it already meets."""
    proc = run(["manage.py", "check"], DEBUG="false", SECRET_KEY=key, ALLOWED_HOSTS="agents.example.com")
    assert proc.returncode != 0
    assert reason in proc.stderr, proc.stderr[-2000:]
    assert key not in proc.stderr, "the key itself is never printed"


def test_check_deploy_is_clean_and_cookies_are_secure():
    env = {"DEBUG": "false", "SECRET_KEY": GOOD_KEY, "ALLOWED_HOSTS": "agents.example.com"}
    proc = run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "System check identified no issues" in proc.stdout, proc.stdout
    settings = json.loads(run(["-c", PRINT_SETTINGS], **env).stdout)
    assert settings["DEBUG"] is False
    assert settings["SESSION_COOKIE_SECURE"] and settings["CSRF_COOKIE_SECURE"]
    assert settings["SESSION_COOKIE_HTTPONLY"] and settings["CSRF_COOKIE_HTTPONLY"]
    assert settings["SECURE_SSL_REDIRECT"] and settings["SECURE_HSTS_SECONDS"] >= 3600
    assert settings["SECURE_HSTS_INCLUDE_SUBDOMAINS"] and settings["SECURE_CONTENT_TYPE_NOSNIFF"]
    assert settings["X_FRAME_OPTIONS"] == "DENY" and settings["ALLOWED_HOSTS"] == ["agents.example.com"]
    assert settings["CONTENT_SECURITY_POLICY"]["DIRECTIVES"]["script-src"] == ["'self'"]  # django-csp's form
    assert (settings["RATE_LIMIT_UPLOADS_PER_MINUTE"], settings["RATE_LIMIT_ACTIONS_PER_MINUTE"]) == (10, 120)
    assert settings["REQUEST_MAX_BYTES"] == settings["DATA_UPLOAD_MAX_MEMORY_SIZE"] == 12 * 1024 * 1024


HSTS_HEADER = (
    "import django; django.setup(); from django.http import HttpResponse; "
    "from django.middleware.security import SecurityMiddleware; from django.test import RequestFactory; "
    "request = RequestFactory().get('/', secure=True, HTTP_HOST='agents.example.com'); "
    "print(SecurityMiddleware(lambda r: HttpResponse())(request).headers.get('Strict-Transport-Security'))"
)


@pytest.mark.parametrize("env, header", [
    ({}, "max-age=3600; includeSubDomains"),
    # a deployment that still sets the old variable changes nothing: subdomains follow HSTS
    ({"SECURE_HSTS_INCLUDE_SUBDOMAINS": "false"}, "max-age=3600; includeSubDomains"),
    ({"SECURE_HSTS_SECONDS": "31536000"}, "max-age=31536000; includeSubDomains"),
    ({"SECURE_HSTS_SECONDS": "0"}, "None"),
    ({"DEBUG": "true"}, "None"),
])
def test_hsts_covers_subdomains_whenever_it_is_sent(env, header):
    env = {"DEBUG": "false", "SECRET_KEY": GOOD_KEY, "ALLOWED_HOSTS": "agents.example.com", **env}
    proc = run(["-c", HSTS_HEADER], **env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == header


def test_the_rate_limit_counters_are_kept_apart_by_the_queue_name():
    """Two deployments sharing one Redis database set RQ_QUEUE apart; their counters follow it."""
    script = "import django; django.setup(); from django.conf import settings; print(settings.CACHES['default']['KEY_PREFIX'])"
    assert run(["-c", script]).stdout.strip() == "ticketagent"
    proc = run(["-c", script], RQ_QUEUE="agents-b", CACHE_KEY_PREFIX="ignored")
    assert proc.stdout.strip() == "agents-b", proc.stderr[-2000:]


def test_debug_on_keeps_plain_http_working_for_make_run():
    settings = json.loads(run(["-c", PRINT_SETTINGS]).stdout)  # no DEBUG, no SECRET_KEY: the local defaults
    assert settings["DEBUG"] is True
    assert not settings["SESSION_COOKIE_SECURE"] and not settings["CSRF_COOKIE_SECURE"]
    assert not settings["SECURE_SSL_REDIRECT"] and settings["SECURE_HSTS_SECONDS"] == 0
    assert "localhost" in settings["ALLOWED_HOSTS"] and "127.0.0.1" in settings["ALLOWED_HOSTS"]


def test_limits_are_configurable_and_strict():
    settings = json.loads(run(["-c", PRINT_SETTINGS], UPLOAD_MAX_BYTES="2000000").stdout)
    # the request cap follows the upload cap: the largest upload and 2 MiB for the form around it
    assert settings["REQUEST_MAX_BYTES"] == settings["DATA_UPLOAD_MAX_MEMORY_SIZE"] == 2_000_000 + 2 * 1024 * 1024
    proc = run(["-c", PRINT_SETTINGS], UPLOAD_MAX_ROWS="lots")
    assert proc.returncode != 0 and "UPLOAD_MAX_ROWS='lots' is not an integer" in proc.stderr
