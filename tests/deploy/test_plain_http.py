"""DEBUG off on plain HTTP with nothing in front (PLAIN_HTTP=true): the login page answers 200, every redirect
stays on http and keeps the port, cookies work without TLS, and the deploy check is clean.

Before: with DEBUG=false every page answered 301 to https:// (a site with no TLS could not be reached at all),
and the session and CSRF cookies carried the Secure flag, which a browser keeps to https pages.
"""

from __future__ import annotations

import re
import subprocess
import sys
from http.cookies import SimpleCookie
from urllib.parse import urljoin, urlsplit

import pytest

from ..conftest import ROOT
from .stack import OPERATOR, Stack, start_stack

pytestmark = [pytest.mark.slow]

PLAIN = {"PLAIN_HTTP": "true", "SECURE_SSL_REDIRECT": None}  # the operator's env: no SECURE_SSL_REDIRECT at all


def _cookies(headers: list[tuple[str, str]]) -> dict[str, str]:
    """name -> the whole Set-Cookie header of each cookie set."""
    return {v.split("=", 1)[0]: v for k, v in headers if k.lower() == "set-cookie"}


def _request(stack: Stack, method: str, path: str, *, headers: dict | None = None, body: bytes | None = None):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", stack.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Host": f"localhost:{stack.port}", **(headers or {})})
        response = conn.getresponse()
        return response.status, response.getheaders(), response.read()
    finally:
        conn.close()


def _location(stack: Stack, headers) -> str:
    """A redirect's target, resolved as a browser that asked http://localhost:<port>/ would."""
    location = dict((k.lower(), v) for k, v in headers)["location"]
    return urljoin(f"http://localhost:{stack.port}/", location)


def test_debug_off_serves_plain_http_and_redirects_keep_the_port(transactional_db, workers, tmp_path):
    stack = start_stack(workers, tmp_path, processes=("web",), env_changes=PLAIN)
    try:
        origin = f"http://localhost:{stack.port}"
        status, headers, body = _request(stack, "GET", "/accounts/login/")
        assert status == 200, (status, headers)
        assert not any(k.lower() == "strict-transport-security" for k, _ in headers), headers
        csrf = _cookies(headers)["csrftoken"]
        assert "secure" not in csrf.lower(), csrf
        for path, want in (("/", "/accounts/login/?next=/"), ("/accounts/login", "/accounts/login/")):
            status, headers, _ = _request(stack, "GET", path)
            assert status in (301, 302), (path, status)
            target = urlsplit(_location(stack, headers))
            assert (target.scheme, target.netloc) == ("http", f"localhost:{stack.port}"), (path, target)
            assert target.path + (f"?{target.query}" if target.query else "") == want
        # signing in works without TLS: the CSRF check passes and the session cookie comes back
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', body)[1].decode()
        jar = SimpleCookie()
        jar.load(csrf)
        form = f"csrfmiddlewaretoken={token}&username={OPERATOR[0]}&password={OPERATOR[1]}".encode()
        status, headers, answer = _request(stack, "POST", "/accounts/login/", body=form, headers={
            "Content-Type": "application/x-www-form-urlencoded", "Origin": origin,
            "Cookie": f"csrftoken={jar['csrftoken'].value}"})
        assert status == 302, (status, answer[:500])
        landing = urlsplit(_location(stack, headers))
        assert landing.netloc == f"localhost:{stack.port}", landing
        session = _cookies(headers)["sessionid"]
        assert "secure" not in session.lower(), session
        jar.load(session)
        status, _, page = _request(stack, "GET", landing.path,
                                   headers={"Cookie": f"sessionid={jar['sessionid'].value}"})
        assert status == 200 and b"Tasks" in page, (landing, status)
        check = stack.manage("check", "--deploy", "--fail-level", "WARNING")
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        stack.procs.stop(grace=10)


def test_without_plain_http_debug_off_still_redirects_to_https(transactional_db, workers, tmp_path):
    """The default is unchanged, and it is what the test above would see without PLAIN_HTTP."""
    stack = start_stack(workers, tmp_path, processes=("web",), env_changes={"SECURE_SSL_REDIRECT": None})
    try:
        status, headers, _ = _request(stack, "GET", "/accounts/login/")
        assert status == 301 and _location(stack, headers).startswith("https://"), (status, headers)
        status, headers, _ = _request(stack, "GET", "/healthz")
        assert status == 200, "the probes stay on plain http for load balancers"
    finally:
        stack.procs.stop(grace=10)


def test_plain_http_with_an_https_setting_is_refused_with_the_names():
    env = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "ticketagent.settings", "DEBUG": "false",
           "SECRET_KEY": "k" * 20 + "abcdefghijklmnopqrstuvwxyz0123456789", "ALLOWED_HOSTS": "localhost",
           "PLAIN_HTTP": "true", "SECURE_SSL_REDIRECT": "true"}
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0
    assert "PLAIN_HTTP=true" in result.stderr and "SECURE_SSL_REDIRECT" in result.stderr, result.stderr[-2000:]
