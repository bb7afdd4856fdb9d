#!/usr/bin/env python3
"""Decide which database ``make test`` uses; print its URL (or nothing).

1. ``TEST_DATABASE_URL`` if set;
2. else a local PostgreSQL at 127.0.0.1:5432 that lets user ``postgres``
   (then the current user) connect to db ``postgres`` within 2 s and create
   databases -> ``postgres://<user>@127.0.0.1:5432/ticketagent`` (Django's
   test runner creates and drops ``test_ticketagent``);
3. else SQLite: prints nothing, so DATABASE_URL stays unset and the settings'
   SQLite default applies.

One line on stderr says which database is used. Exit status is always 0.
"""

from __future__ import annotations

import getpass
import os
import sys
from urllib.parse import urlsplit

PG_HOST = "127.0.0.1"
PG_PORT = 5432
PG_DB = "ticketagent"


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url


def _pg_users() -> list[str]:
    users = ["postgres"]
    try:
        me = getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry for the uid
        me = ""
    if me and me not in users:
        users.append(me)
    return users


def _try_postgres(user: str) -> tuple[bool, str]:
    """(usable, why not) for a connection as ``user``."""
    try:
        import psycopg
    except ImportError:
        return False, "psycopg is not installed"
    try:
        with psycopg.connect(
            host=PG_HOST, port=PG_PORT, user=user, dbname="postgres", connect_timeout=2
        ) as conn:
            row = conn.execute(
                "SELECT rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
    except Exception as exc:  # noqa: BLE001 - any failure means "not usable"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return False, first
    if not row or not row[0]:
        return False, f"role {user!r} may not create databases"
    return True, ""


def pick() -> tuple[str, str]:
    """``(url or "", description)``."""
    explicit = os.environ.get("TEST_DATABASE_URL", "").strip()
    if explicit:
        return explicit, f"TEST_DATABASE_URL ({_redacted(explicit)})"
    reasons = []
    for user in _pg_users():
        ok, why = _try_postgres(user)
        if ok:
            url = f"postgres://{user}@{PG_HOST}:{PG_PORT}/{PG_DB}"
            return url, f"local PostgreSQL ({url})"
        reasons.append(f"{user}: {why}")
    return "", "SQLite (no usable PostgreSQL at {}:{}: {})".format(PG_HOST, PG_PORT, "; ".join(reasons))


def main() -> int:
    url, description = pick()
    print(f"test database: {description}", file=sys.stderr)
    if url:
        print(url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
