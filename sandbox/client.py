"""The sandbox's HTTP client, as tests and tools drive it: faults, counts, deliveries, reset.

    sb = SandboxClient(url)
    sb.set_faults(drop_next={"notify": 1})
    ...
    assert sb.counts()["duplicates"] == 0

The process itself is started by `ops.processes.start_sandbox()`.
Standard library only (no Django, no pytest).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

__all__ = ["SandboxClient", "SandboxError"]


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


