"""PostgreSQL's own account of a database's work: `pg_stat_database` counters and its statement log, per window.

Two sources, both on the server's side:

* `pg_stat_database` (`xact_commit`, `xact_rollback`, `active_time`): what
  every backend of one database did. A backend reports its counters when it
  goes idle (at most once a second) and when it exits, so a window is only
  exact between two moments when the backends that worked in it have exited.
  Read through a connection to another database (`postgres`), so reading
  adds nothing to the counts.
* The server's statement log, switched on for the measured databases only
  (`ALTER DATABASE … SET log_min_duration_statement = 0`, which applies to
  sessions opened after it, and is reset afterwards): one line per statement
  with its own duration, its backend's pid and a timestamp. So statements,
  transactions (a `BEGIN … COMMIT`, or a statement outside one) and the
  server's time can be counted for any time window and any set of backends.
  It needs the server's log file readable here (same host) and a
  `log_line_prefix` with the time, the pid and the database (`%m [%p] … %d`,
  Debian's default); `StatementLog.locate()` says why not otherwise.

`pg_stat_statements` would give the same per statement, but it must be in
`shared_preload_libraries` (a server restart), which a bench does not do to
a shared server.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from zoneinfo import ZoneInfo

import dj_database_url
import psycopg
from psycopg import sql

TX_CONTROL = re.compile(r"^\s*(BEGIN|START TRANSACTION|COMMIT|END|ROLLBACK)\b", re.IGNORECASE)
TX_END = re.compile(r"^\s*(COMMIT|END|ROLLBACK)\b", re.IGNORECASE)
LINE = re.compile(r"^(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) \S+ \[(?P<pid>\d+)\] "
                  r"(?:\S*@(?P<db>\S*) )?(?P<level>[A-Z]+):  duration: (?P<ms>[\d.]+) ms  "
                  r"(?P<kind>statement|parse|bind|execute)(?: [^:]*)?: (?P<text>.*)$")


def admin_connection(url: str) -> psycopg.Connection:
    """An autocommit connection to the server's `postgres` database (reads
    of statistics there count against no measured database)."""
    db = dj_database_url.parse(url)
    params = {"host": db["HOST"] or "127.0.0.1", "port": db["PORT"] or 5432, "user": db["USER"] or "postgres",
              "dbname": "postgres", "connect_timeout": 5}
    if db["PASSWORD"]:
        params["password"] = db["PASSWORD"]
    return psycopg.connect(**params, autocommit=True)


@dataclass(frozen=True)
class DbCounters:
    commits: int
    rollbacks: int
    active_ms: float
    sessions: int  # each session's start is a transaction too (the server reads its catalogs)

    def __sub__(self, other: DbCounters) -> DbCounters:
        return DbCounters(self.commits - other.commits, self.rollbacks - other.rollbacks,
                          self.active_ms - other.active_ms, self.sessions - other.sessions)


def db_counters(admin: psycopg.Connection, dbname: str) -> DbCounters:
    row = admin.execute("SELECT xact_commit, xact_rollback, COALESCE(active_time, 0), COALESCE(sessions, 0) "
                        "FROM pg_stat_database WHERE datname = %s", [dbname]).fetchone()
    return DbCounters(int(row[0]), int(row[1]), float(row[2]), int(row[3]))


def wait_backends_gone(admin: psycopg.Connection, dbname: str, timeout: float = 15.0) -> bool:
    """Until no client backend is connected to `dbname` (their counters are
    reported when they exit)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_type = "
                          "'client backend'", [dbname]).fetchone()[0]
        if not n:
            time.sleep(0.3)  # the exit's report comes just after the backend leaves the list
            return True
        time.sleep(0.1)
    return False


@dataclass
class Tally:
    """What a set of backends did in one database in one window. Statements
    whose text is in the tally's `apart` set (e.g. a queue's polling, taken
    from an idle window) are counted apart, and so is a transaction made of
    nothing else."""

    statements: int = 0  # every statement the server executed, transaction control not counted
    tx_control: int = 0  # BEGIN and COMMIT (or ROLLBACK) of the counted transactions
    transactions: int = 0  # BEGIN … COMMIT/ROLLBACK blocks, plus statements run outside one
    server_ms: float = 0.0  # the statements' own durations (parse, bind, execute; commit flushes included)
    apart_statements: int = 0
    apart_transactions: int = 0
    apart_ms: float = 0.0
    pids: set[int] = field(default_factory=set)

    def per(self, n: float) -> dict:
        return {"transactions": self.transactions / n, "statements": self.statements / n,
                "tx_control": self.tx_control / n, "server_ms": self.server_ms / n,
                "apart_transactions": self.apart_transactions / n, "apart_statements": self.apart_statements / n,
                "apart_ms": self.apart_ms / n}


class StatementLog:
    """The server's log file, read from an offset: statement lines with durations."""

    def __init__(self, path: Path, zone: str):
        self.path = path
        self.zone = ZoneInfo(zone)

    @classmethod
    def locate(cls, admin: psycopg.Connection) -> tuple[StatementLog | None, str]:
        """The log, or None and why it cannot be read here."""
        prefix = admin.execute("SHOW log_line_prefix").fetchone()[0]
        if not all(part in prefix for part in ("%m", "[%p]", "%d")):
            return None, f"log_line_prefix {prefix!r} lacks %m, [%p] or %d"
        zone = admin.execute("SHOW log_timezone").fetchone()[0]
        path = None
        with contextlib.suppress(psycopg.Error):
            current = admin.execute("SELECT pg_current_logfile()").fetchone()[0]
            if current:
                data = admin.execute("SHOW data_directory").fetchone()[0]
                path = Path(current) if current.startswith("/") else Path(data) / current
        if path is None:  # no logging collector: the postmaster's stderr
            try:
                data = admin.execute("SHOW data_directory").fetchone()[0]
                pid = int((Path(data) / "postmaster.pid").read_text().split()[0])
                path = Path(f"/proc/{pid}/fd/2").resolve(strict=True)
            except (OSError, ValueError, IndexError) as exc:
                return None, f"the server's log is not readable here ({type(exc).__name__}: {exc})"
        if not path.is_file():
            return None, f"the server logs to {path}, not a file"
        try:
            with path.open("rb"):
                pass
        except OSError as exc:
            return None, f"cannot read the server's log {path}: {exc}"
        return cls(path, zone), ""

    def offset(self) -> int:
        return self.path.stat().st_size

    def entries(self, since: int, dbname: str) -> list[tuple[float, int, str, float, str]]:
        """(time, pid, kind, ms, text) of `dbname`'s statement lines written after offset `since`."""
        out = []
        with self.path.open("rb") as f:
            f.seek(since)
            for raw in f:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                m = LINE.match(line)
                if m is None or m["db"] != dbname:
                    continue
                at = dt.datetime.strptime(m["ts"], "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=self.zone).timestamp()
                out.append((at, int(m["pid"]), m["kind"], float(m["ms"]), m["text"]))
        return out


def tally(entries, *, start: float, end: float, exclude: set[int] = frozenset(),
          apart: set[str] = frozenset()) -> Tally:
    """Count the entries of [start, end] from backends not in `exclude`."""
    t = Tally()
    open_tx: dict[int, bool] = defaultdict(bool)
    real: dict[int, bool] = defaultdict(bool)  # the open transaction did something not `apart`
    for at, pid, kind, ms, text in entries:
        if pid in exclude or not start <= at <= end:
            continue
        t.pids.add(pid)
        if TX_CONTROL.match(text):
            ending = TX_END.match(text) is not None
            if ending and open_tx[pid] and not real[pid]:
                t.apart_ms += ms  # the commit of a transaction that did only `apart` work
            else:
                t.server_ms += ms
            if kind in ("parse", "bind"):
                continue
            if ending:
                if real[pid]:
                    t.transactions += 1
                    t.tx_control += 2  # its BEGIN and its COMMIT (or ROLLBACK)
                elif open_tx[pid]:
                    t.apart_transactions += 1
                open_tx[pid] = real[pid] = False
            else:
                open_tx[pid], real[pid] = True, False
            continue
        is_apart = text in apart
        if is_apart:
            t.apart_ms += ms
        else:
            t.server_ms += ms
        if kind in ("parse", "bind"):
            continue
        if is_apart:
            t.apart_statements += 1
        else:
            t.statements += 1
            real[pid] = True
        if not open_tx[pid]:  # a statement in autocommit is a transaction of its own
            if is_apart:
                t.apart_transactions += 1
            else:
                t.transactions += 1
                real[pid] = False
    return t


def texts(entries, *, start: float, end: float, exclude: set[int] = frozenset()) -> set[str]:
    """The distinct statement texts of a window (e.g. what an idle worker polls with)."""
    return {text for at, pid, kind, _, text in entries
            if pid not in exclude and start <= at <= end and not TX_CONTROL.match(text)}


@contextlib.contextmanager
def statement_logging(admin: psycopg.Connection, dbnames: list[str]):
    """Log every statement of these databases with its duration, for the
    sessions opened inside the block."""
    for name in dbnames:
        admin.execute(sql.SQL("ALTER DATABASE {} SET log_min_duration_statement = 0").format(sql.Identifier(name)))
    try:
        yield
    finally:
        for name in dbnames:
            admin.execute(sql.SQL("ALTER DATABASE {} RESET log_min_duration_statement").format(
                sql.Identifier(name)))
