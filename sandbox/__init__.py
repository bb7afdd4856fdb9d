"""The sandbox helpdesk: a separate process that plays a customer's helpdesk (JSON REST API) and mail server (SMTP).

The demo, the tests and the kill test point the agents at it. It records every
delivery in SQLite, honours or ignores idempotency keys, answers look-ups by
key and injects faults; counting what it received is how "nothing happened
twice" is proven. It imports nothing from the product (no Django, no
``ticketagent``, no ``ledger``).

    python -m sandbox --port 8025 --smtp-port 8026 --db var/sandbox.sqlite3

Modules, one job each: ``store`` (the deliveries), ``faults``, ``state`` (what
the listeners share), ``api`` (HTTP), ``smtp`` (aiosmtpd), ``messages``
(email -> delivery), ``validation``, ``page`` (the HTML view), ``server`` (the
process), ``client`` (what tests use). See ``docs/sandbox.md``.
"""
