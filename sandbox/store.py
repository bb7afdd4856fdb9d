"""The delivery rows in SQLite: what the sandbox received, counted exactly.

Every effect the sandbox accepts is one delivery row; counting them is how the
tests and the kill test prove that nothing happened twice, so a write is
committed durably (``synchronous=FULL``) before the caller answers, and the
dedupe check and the insert are one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
import threading
import uuid

from sandbox.endpoints import ENDPOINTS

__all__ = ["Store"]


def _utcnow() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")


class Store:
    """Delivery rows in SQLite, serialised by a lock.

    Each write runs in a ``BEGIN IMMEDIATE`` transaction (the dedupe check and
    the insert are atomic, even against another process sharing the file) and
    is committed with ``synchronous=FULL`` before the caller answers.
    Delivery ids (``dlv-<n>``) are never reused, not even after ``reset``.
    """

    def __init__(self, path: str | None = None):
        self.path = path or ":memory:"
        if self.path != ":memory:":
            parent = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(parent, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=30
        )
        self._conn.row_factory = sqlite3.Row
        with self._lock:
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute(
                """
                CREATE TABLE IF NOT EXISTS deliveries (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    key TEXT NOT NULL DEFAULT '',
                    method TEXT NOT NULL,
                    endpoint TEXT NOT NULL,
                    ticket TEXT NOT NULL DEFAULT '',
                    payload TEXT NOT NULL,
                    created_at TEXT NOT NULL
                )
                """
            )
            self._conn.execute(
                "CREATE INDEX IF NOT EXISTS deliveries_key ON deliveries (key)"
            )
            self.instance_id = self._instance_id()

    def _instance_id(self) -> str:
        """This helpdesk's identity: generated once, kept with its deliveries (a fresh database is another
        helpdesk). ``reset`` keeps it: the same helpdesk, emptied."""
        self._conn.execute("CREATE TABLE IF NOT EXISTS instance (id TEXT NOT NULL)")
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            row = self._conn.execute("SELECT id FROM instance LIMIT 1").fetchone()
            if row is None:
                row = (f"sandbox-{uuid.uuid4().hex}",)
                self._conn.execute("INSERT INTO instance (id) VALUES (?)", row)
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        return row[0]

    @staticmethod
    def _row(row: sqlite3.Row) -> dict:
        try:
            payload = json.loads(row["payload"])
        except ValueError:
            payload = row["payload"]
        return {
            "id": f"dlv-{row['seq']}",
            "key": row["key"],
            "method": row["method"],
            "endpoint": row["endpoint"],
            "ticket": row["ticket"],
            "payload": payload,
            "created_at": row["created_at"],
        }

    def record(
        self,
        *,
        key: str,
        method: str,
        endpoint: str,
        ticket: str,
        payload,
        honor_keys: bool,
    ) -> tuple[dict, bool]:
        """Record one delivery; returns ``(delivery, replayed)``.

        With ``honor_keys`` and a non-empty key that already has a delivery,
        nothing is written and the first existing delivery is returned with
        ``replayed=True``.
        """
        payload_text = json.dumps(payload, ensure_ascii=False, sort_keys=True)
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                if honor_keys and key:
                    row = conn.execute(
                        "SELECT * FROM deliveries WHERE key = ? ORDER BY seq LIMIT 1",
                        (key,),
                    ).fetchone()
                    if row is not None:
                        conn.execute("COMMIT")
                        return self._row(row), True
                cur = conn.execute(
                    "INSERT INTO deliveries (key, method, endpoint, ticket, payload, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (key, method, endpoint, ticket, payload_text, _utcnow()),
                )
                seq = cur.lastrowid
                row = conn.execute(
                    "SELECT * FROM deliveries WHERE seq = ?", (seq,)
                ).fetchone()
                conn.execute("COMMIT")
            except BaseException:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise
        return self._row(row), False

    def deliveries(
        self,
        *,
        key: str | None = None,
        endpoint: str | None = None,
        ticket: str | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[dict]:
        where, args = [], []
        for column, value in (("key", key), ("endpoint", endpoint), ("ticket", ticket)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        sql = "SELECT * FROM deliveries"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq " + ("DESC" if newest_first else "ASC")
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        with self._lock:
            rows = self._conn.execute(sql, args).fetchall()
        return [self._row(r) for r in rows]

    def counts(self) -> dict:
        with self._lock:
            total = self._conn.execute("SELECT COUNT(*) FROM deliveries").fetchone()[0]
            by_endpoint = dict(
                self._conn.execute(
                    "SELECT endpoint, COUNT(*) FROM deliveries GROUP BY endpoint"
                ).fetchall()
            )
            by_key = dict(
                self._conn.execute(
                    "SELECT key, COUNT(*) FROM deliveries WHERE key != ''"
                    " GROUP BY key ORDER BY MIN(seq)"
                ).fetchall()
            )
        endpoints = {name: 0 for name in ENDPOINTS}
        endpoints.update(by_endpoint)
        return {
            "deliveries": total,
            "by_endpoint": endpoints,
            "by_key": by_key,
            "duplicates": sum(1 for n in by_key.values() if n > 1),
        }

    def reset(self) -> None:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute("DELETE FROM deliveries")
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def close(self) -> None:
        with self._lock:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass

