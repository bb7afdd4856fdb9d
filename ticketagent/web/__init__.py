"""The web layer: server-rendered pages (htmx), /metrics, and the request middleware.

`access` (login, roles, rendering), one module of views per page family
(`tasks`, `upload`, `review`, `ledger`, `playbooks`, `rehearsals`), `selectors*` (the pages' reads),
`metrics` (Prometheus), `middleware` and `ratelimit` (request limits, CSP,
secret redaction).
"""
