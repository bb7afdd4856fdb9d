"""Sandbox helpdesk: a separate process that plays the customer's helpdesk
(JSON REST API) and mail server (SMTP) for the demo, the tests and the kill
test.

Everything in this package (``server.py``, ``client.py``, ``__main__.py``)
uses the standard library only -- no Django imports.

Run it with ``python -m sandbox --port 8025 --smtp-port 8026``;
see ``docs/sandbox.md``.
"""

__all__ = ["client", "server"]
