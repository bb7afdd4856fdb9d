"""A sandbox as tests and tools drive it: a child process on free ports, spoken to over HTTP.

    proc, url, smtp_port = start_sandbox(tmp_path)
    sb = SandboxClient(url)
    sb.set_faults(drop_next={"notify": 1})
    ...
    assert sb.counts()["duplicates"] == 0
    stop_sandbox(proc)

Standard library only (no Django, no pytest).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

__all__ = ["SandboxClient", "SandboxError", "start_sandbox", "stop_sandbox"]

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# Never route sandbox traffic through an HTTP proxy from the environment.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class SandboxError(RuntimeError):
    def __init__(self, status: int, body):
        super().__init__(f"sandbox answered {status}: {body!r}")
        self.status = status
        self.body = body


class SandboxClient:
    """Talks to a running sandbox over HTTP (control + write endpoints)."""

    def __init__(self, base_url: str, timeout: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    # -- low level -------------------------------------------------------------
    def request(self, method: str, path: str, body=None, headers: dict | None = None):
        """Returns ``(status, decoded JSON or text)``; never raises on 4xx/5xx."""
        data = None
        hdrs = dict(headers or {})
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
            hdrs.setdefault("Content-Type", "application/json")
        req = urllib.request.Request(
            self.base_url + path, data=data, method=method, headers=hdrs
        )
        try:
            with _opener.open(req, timeout=self.timeout) as resp:
                status, raw, ctype = (
                    resp.status,
                    resp.read(),
                    resp.headers.get("Content-Type", ""),
                )
        except urllib.error.HTTPError as exc:
            status, raw, ctype = (
                exc.code,
                exc.read(),
                exc.headers.get("Content-Type", ""),
            )
        text = raw.decode("utf-8", "replace")
        if "json" in ctype:
            return status, json.loads(text)
        return status, text

    def _ok(self, method: str, path: str, body=None):
        status, data = self.request(method, path, body)
        if status >= 400:
            raise SandboxError(status, data)
        return data

    # -- write endpoints ---------------------------------------------------------
    def write(self, endpoint: str, ticket: str, body=None, key: str | None = None):
        """Call a write endpoint; returns ``(status, json)``."""
        method = "PUT" if endpoint == "draft" else "POST"
        headers = {"Idempotency-Key": key} if key else {}
        path = f"/api/tickets/{urllib.parse.quote(ticket, safe='')}/{endpoint}"
        return self.request(method, path, body if body is not None else {}, headers)

    def lookup(self, key: str) -> dict | None:
        """The lookup answer (``found``, ``count``, ``id``, ``deliveries``) or ``None``."""
        status, data = self.request(
            "GET", "/api/lookup/" + urllib.parse.quote(key, safe="")
        )
        if status == 404:
            return None
        if status >= 400:
            raise SandboxError(status, data)
        return data

    # -- control -----------------------------------------------------------------
    def health(self) -> bool:
        try:
            status, data = self.request("GET", "/_sandbox/health")
        except (OSError, ValueError):
            return False
        return status == 200 and isinstance(data, dict) and data.get("ok") is True

    def counts(self) -> dict:
        return self._ok("GET", "/_sandbox/counts")

    def deliveries(self, key: str | None = None, **filters) -> list[dict]:
        params = {k: v for k, v in dict(filters, key=key).items() if v is not None}
        query = ("?" + urllib.parse.urlencode(params)) if params else ""
        return self._ok("GET", "/_sandbox/deliveries" + query)

    def faults(self) -> dict:
        return self._ok("GET", "/_sandbox/faults")

    def set_faults(self, **faults) -> dict:
        return self._ok("POST", "/_sandbox/faults", faults)

    def clear_faults(self) -> dict:
        return self._ok("DELETE", "/_sandbox/faults")

    def reset(self) -> dict:
        return self._ok("POST", "/_sandbox/reset", {})

    def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.health():
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"sandbox at {self.base_url} not ready after {timeout}s"
                )
            time.sleep(0.05)


# ------------------------------------------------------------------------------
# Subprocess launcher
# ------------------------------------------------------------------------------


def _tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def _command(host: str, db_path: Path, ignore_keys: bool, quiet: bool, extra_args) -> list[str]:
    cmd = [sys.executable, "-m", "sandbox", "--host", host, "--port", "0", "--smtp-port", "0", "--db", str(db_path)]
    if ignore_keys:
        cmd.append("--ignore-keys")
    if quiet:
        cmd.append("--quiet")
    cmd.extend(extra_args)
    return cmd


def _spawn(cmd: list[str], log_path: Path) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=str(PROJECT_ROOT),
            env=env,
        )


def _read_ports(proc: subprocess.Popen, log_path: Path, timeout: float) -> tuple[int, int]:
    """The ports from the ready line; stops the process if it has none."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
    try:
        first = lines.get(timeout=timeout)
    except queue.Empty:
        stop_sandbox(proc, timeout=2)
        raise RuntimeError(f"sandbox did not print its ports within {timeout}s:\n{_tail(log_path)}") from None
    if not first:
        proc.wait(timeout=5)
        raise RuntimeError(
            f"sandbox exited with {proc.returncode} before printing its ports:\n{_tail(log_path)}"
        )
    try:
        ports = json.loads(first)
        return int(ports["http"]), int(ports["smtp"])
    except (ValueError, KeyError, TypeError):
        stop_sandbox(proc, timeout=2)
        raise RuntimeError(f"unexpected sandbox ready line: {first!r}") from None


def start_sandbox(
    tmp_path,
    *,
    ignore_keys: bool = False,
    db=None,
    host: str = "127.0.0.1",
    quiet: bool = False,
    timeout: float = 15.0,
    extra_args=(),
):
    """Spawn ``python -m sandbox`` on free ports.

    Returns ``(proc, http_url, smtp_port)``.  Each call gets its own
    directory under ``tmp_path`` holding ``sandbox.sqlite3`` (unless ``db`` is
    given) and ``sandbox.log`` (the process's stderr; never a pipe, so a
    chatty sandbox cannot block).  Extra attributes on ``proc``:
    ``sandbox_url``, ``smtp_port``, ``log_path``, ``db_path``.
    Stop it with :func:`stop_sandbox` (SIGTERM, clean exit 0).
    """
    workdir = Path(tempfile.mkdtemp(prefix="sandbox-", dir=str(tmp_path)))
    db_path = Path(db) if db is not None else workdir / "sandbox.sqlite3"
    log_path = workdir / "sandbox.log"
    proc = _spawn(_command(host, db_path, ignore_keys, quiet, extra_args), log_path)
    http_port, smtp_port = _read_ports(proc, log_path, timeout)
    url_host = f"[{host}]" if ":" in host else host
    url = f"http://{url_host}:{http_port}"
    try:
        SandboxClient(url).wait_ready(timeout)
    except TimeoutError:
        stop_sandbox(proc, timeout=2)
        raise
    proc.sandbox_url = url
    proc.smtp_port = smtp_port
    proc.log_path = log_path
    proc.db_path = db_path
    return proc, url, smtp_port


def stop_sandbox(proc: subprocess.Popen, timeout: float = 5.0) -> int:
    """SIGTERM the sandbox (SIGKILL after ``timeout``); returns its exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        try:
            proc.stdout.close()
        except OSError:
            pass
    return proc.returncode
