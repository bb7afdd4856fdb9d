"""The HTML page at ``/``: the mode, the counts, the faults and the latest deliveries, for a person to watch.

It refreshes itself every 5 seconds. Everything in it is HTML-escaped, and
it is sent with a strict Content-Security-Policy (:data:`CSP`).
"""

from __future__ import annotations

import html
import json

from sandbox.state import SandboxState

__all__ = ["CSP", "HTML_LIMIT", "render_index"]

HTML_LIMIT = 200
CSP = "default-src 'none'; style-src 'unsafe-inline'"

_HEAD = (
    "<!doctype html><html><head><meta charset='utf-8'>"
    "<meta http-equiv='refresh' content='5'>"
    "<title>Sandbox helpdesk</title><style>"
    "body{font-family:system-ui,sans-serif;margin:1.5em;}"
    "table{border-collapse:collapse;font-size:.85em;}"
    "td,th{border:1px solid #ccc;padding:.25em .5em;vertical-align:top;text-align:left;}"
    "pre{margin:0;white-space:pre-wrap;max-width:60em;}"
    ".dup{background:#fdd;}"
    "</style></head><body>"
    "<h1>Sandbox helpdesk</h1>"
)


def _row(d: dict, dup_keys: dict) -> str:
    e = html.escape
    cls = " class='dup'" if d["key"] in dup_keys else ""
    payload = json.dumps(d["payload"], indent=1, ensure_ascii=False, sort_keys=True)
    return (
        f"<tr{cls}><td>{e(d['id'])}</td><td>{e(d['created_at'])}</td>"
        f"<td>{e(d['endpoint'])}</td><td>{e(d['method'])}</td>"
        f"<td>{e(d['ticket'])}</td><td>{e(d['key'])}</td>"
        f"<td><pre>{e(payload)}</pre></td></tr>"
    )


def render_index(state: SandboxState) -> bytes:
    """The page, UTF-8 encoded."""
    counts = state.counts()
    faults = state.faults.snapshot()
    rows = state.store.deliveries(limit=HTML_LIMIT, newest_first=True)
    e = html.escape
    summary = {k: v for k, v in counts.items() if k != "by_key"}
    dup_keys = {k: n for k, n in counts["by_key"].items() if n > 1}
    mode = "honor keys (dedupe by Idempotency-Key)" if counts["honor_keys"] else "IGNORE keys (no dedupe)"
    parts = [
        _HEAD,
        f"<p>Mode: <strong>{e(mode)}</strong></p>",
        f"<h2>Counts</h2><pre>{e(json.dumps(summary, indent=2, sort_keys=True))}</pre>",
        f"<h2>Duplicated keys ({len(dup_keys)})</h2><pre>{e(json.dumps(dup_keys, indent=2))}</pre>",
        f"<h2>Faults</h2><pre>{e(json.dumps(faults, indent=2, sort_keys=True))}</pre>",
        f"<h2>Last {HTML_LIMIT} deliveries (newest first)</h2>",
        "<table><tr><th>id</th><th>created</th><th>endpoint</th><th>method</th>"
        "<th>ticket</th><th>key</th><th>payload</th></tr>",
        *(_row(d, dup_keys) for d in rows),
        "</table></body></html>\n",
    ]
    return "".join(parts).encode("utf-8")
