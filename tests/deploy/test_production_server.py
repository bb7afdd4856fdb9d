"""The production stack as deployed (DEBUG off, gunicorn from the Procfile, collectstatic, PostgreSQL, real
workers): static files with hashed names and long cache headers, probes a load balancer can reach, and
request bodies that are cut short or contradict themselves never create a task.

Before: with DEBUG off under the development server /static/app.css and the htmx script were 404; there was
no production server and no probe; two conflicting Content-Length headers were accepted and a body cut short
after 350 of 5,000,000 declared bytes still created a task.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import time
from http.cookies import SimpleCookie

import pytest

from ticketagent.models import Task

from ..conftest import ROOT, wait_for
from ..factories import csv_batch
from .stack import OPERATOR, Stack, start_stack

pytestmark = [pytest.mark.slow]

YEAR = "max-age=315360000"


def test_pages_link_hashed_static_files_served_with_long_cache_headers(production_stack):
    status, _, body = production_stack.get("/accounts/login/")
    assert status == 200
    html = body.decode()
    css = re.search(r'href="(/static/app\.[0-9a-f]{12}\.css)"', html)
    htmx = re.search(r'src="(/static/django_htmx/htmx-2\.min\.[0-9a-f]{12}\.js)"', html)
    js = re.search(r'src="(/static/app\.[0-9a-f]{12}\.js)"', html)
    assert css and htmx and js, html[:1500]
    for path, kind in ((css[1], "text/css"), (htmx[1], "javascript"), (js[1], "javascript")):
        status, headers, content = production_stack.get(path, {"Accept-Encoding": "gzip"})
        assert status == 200 and kind in headers["content-type"], (path, status, headers)
        assert YEAR in headers["cache-control"] and "immutable" in headers["cache-control"], headers
        assert content, path
    status, headers, _ = production_stack.get(css[1], {"Accept-Encoding": "gzip"})
    assert headers.get("content-encoding") == "gzip", "compressed copies are made by collectstatic"
    assert production_stack.get("/static/no-such-file.css")[0] == 404


def test_probes_answer_a_load_balancer_by_address_over_plain_http(production_stack):
    for host in ("10.1.2.3:8000", "203.0.113.5"):  # not in ALLOWED_HOSTS: a balancer probing by address
        status, headers, body = production_stack.get("/healthz", {"Host": host})
        assert (status, json.loads(body)) == (200, {"status": "alive"})
        assert headers["cache-control"] == "no-store"
        status, _, body = production_stack.get("/readyz", {"Host": host})
        ready = json.loads(body)
        assert status == 200 and ready == {"status": "ready", "database": "ok", "migrations": "ok", "redis": "ok",
                                           "workers": ready["workers"]}, ready
        assert ready["workers"] >= 1
    # everything else still checks the host and needs a login
    assert production_stack.get("/", {"Host": "203.0.113.5"})[0] == 400
    assert production_stack.get("/")[0] == 302


def test_the_workers_heartbeat_is_visible_to_an_orchestrator(production_stack):
    # rq marks a new worker idle only at its first wait for a job, a moment after it registered
    healthy = wait_for(lambda: ((p := production_stack.manage("worker-health")).returncode == 0
                                and ": idle, last heartbeat" in p.stdout and p),
                       timeout=30, message="worker-health to pass with the worker idle")
    assert "ok" in healthy.stdout
    missing = production_stack.manage("worker-health", "--name", "no-such-worker")
    assert missing.returncode == 1 and "no worker named 'no-such-worker' is registered" in missing.stderr


# --------------------------------------------------------------------------- request bodies


def _session(stack: Stack) -> tuple[str, str]:
    """(cookie header, CSRF token) of a logged-in operator, through the login form."""
    sock_get = _raw(stack.port, b"GET /accounts/login/ HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    cookies = SimpleCookie()
    for line in sock_get.split(b"\r\n"):
        if line.lower().startswith(b"set-cookie:"):
            cookies.load(line.split(b":", 1)[1].decode())
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', sock_get)[1].decode()
    form = f"csrfmiddlewaretoken={token}&username={OPERATOR[0]}&password={OPERATOR[1]}".encode()
    answer = _raw(stack.port, b"POST /accounts/login/ HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                  b"Content-Type: application/x-www-form-urlencoded\r\n"
                  + f"Cookie: csrftoken={cookies['csrftoken'].value}\r\nContent-Length: {len(form)}\r\n".encode()
                  + b"Origin: http://localhost\r\n\r\n" + form)
    assert answer.startswith(b"HTTP/1.1 302"), answer[:500]
    for line in answer.split(b"\r\n"):
        if line.lower().startswith(b"set-cookie:"):
            cookies.load(line.split(b":", 1)[1].decode())
    cookie = f"csrftoken={cookies['csrftoken'].value}; sessionid={cookies['sessionid'].value}"
    return cookie, cookies["csrftoken"].value


def _raw(port: int, data: bytes, *, close_after_send: bool = True) -> bytes:
    """Send bytes as they are; with close_after_send the client stops sending (EOF) at once."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        if close_after_send:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def _upload_request(cookie: str, token: str, content_lengths: list[int], body: bytes) -> bytes:
    head = ("POST /upload/ HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
            f"Content-Type: multipart/form-data; boundary=xyzzy\r\nCookie: {cookie}\r\nX-CSRFToken: {token}\r\n"
            "Origin: http://localhost\r\nHX-Request: true\r\n")
    head += "".join(f"Content-Length: {n}\r\n" for n in content_lengths)
    return head.encode() + b"\r\n" + body


def _multipart(data: bytes) -> bytes:
    return (b'--xyzzy\r\nContent-Disposition: form-data; name="notify_channel"\r\n\r\nhelpdesk\r\n'
            b'--xyzzy\r\nContent-Disposition: form-data; name="file"; filename="cut.csv"\r\n'
            b"Content-Type: text/csv\r\n\r\n" + data + b"\r\n--xyzzy--\r\n")


def _assert_no_task_appears():
    time.sleep(1)  # a request that were to create a task has answered by now
    assert Task.objects.count() == 0


def _check_bodies(port: int, cookie: str, token: str, *, server: str) -> None:
    whole = _multipart(csv_batch(2))
    # a whole, valid form, but announced as 5,000,000 bytes: the client stops (or its connection breaks)
    # after what it sent. Django's multipart parser reads what arrived as a complete form.
    answer = _raw(port, _upload_request(cookie, token, [5_000_000], whole))
    assert answer.startswith(b"HTTP/1.1 400"), (server, answer[:300], re.findall(rb"<li>.{0,300}", answer))
    assert f"the request body ended after {len(whole):,} of the 5,000,000 bytes".encode() in answer, answer[-600:]
    _assert_no_task_appears()
    if server == "gunicorn":  # the development server keeps the first of two Content-Length headers
        answer = _raw(port, _upload_request(cookie, token, [len(whole), 5_000_000], whole))
        assert answer.startswith(b"HTTP/1.1 400"), answer[:600]
        answer = _raw(port, _upload_request(cookie, token, [len(whole), len(whole) + 1], whole))
        assert answer.startswith(b"HTTP/1.1 400"), answer[:600]
        _assert_no_task_appears()
    # the same connection with a whole, honest body does create the task: the checks above meant something
    answer = _raw(port, _upload_request(cookie, token, [len(whole)], whole))
    assert answer.startswith(b"HTTP/1.1 204") and b"HX-Redirect: /tasks/" in answer, answer[:600]
    assert Task.objects.count() == 1


def test_a_cut_or_contradictory_body_never_creates_a_task_under_gunicorn(transactional_db, workers, tmp_path):
    stack = start_stack(workers, tmp_path, processes=("web",))
    try:
        cookie, token = _session(stack)
        _check_bodies(stack.port, cookie, token, server="gunicorn")
    finally:
        stack.procs.stop(grace=10)


def test_a_cut_body_never_creates_a_task_under_the_development_server(transactional_db, workers, tmp_path):
    stack = start_stack(workers, tmp_path, processes=())
    port = stack.port
    stack.procs.start("runserver", [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"])
    try:
        stack.wait_ready()
        cookie, token = _session(stack)
        _check_bodies(port, cookie, token, server="runserver")
    finally:
        stack.procs.stop(grace=10)


def test_the_procfile_names_the_processes_make_run_and_the_systemd_units_use():
    from ops.procfile import command_line, read_procfile

    commands = read_procfile(ROOT / "Procfile")
    assert list(commands) == ["web", "worker", "sandbox"]  # the workers run the recovery sweep: no process of its own
    assert commands["worker"] == "python manage.py worker"
    assert command_line(commands["sandbox"], {"SANDBOX_PORT": "0", "TICKETAGENT_VAR_DIR": "/v"})[1:] == [
        "-m", "sandbox", "--port", "0", "--smtp-port", "8026", "--db", "/v/sandbox.sqlite3"]
    assert command_line(commands["worker"], {})[0] == sys.executable
    units = {p.stem.rstrip("@"): p.read_text() for p in (ROOT / "deploy" / "systemd").glob("*.service")}
    assert set(units) >= {"ticketagent-web", "ticketagent-worker"} and "ticketagent-sweep" not in units
    for name in ("web", "worker"):
        unit = units[f"ticketagent-{name}"]
        program = commands[name].split()[0]
        assert re.search(rf"^ExecStart=\S*{program}\s", unit, re.M), (name, unit)
    run_py = (ROOT / "scripts" / "run.py").read_text()
    assert 'commands["worker"]' in run_py and 'commands["web"]' in run_py
    assert '["sandbox"]' in run_py
