"""The bench's side of the DBOS peer: its database, its workers, submitting tickets and waiting for their end.

The peer (ops/bench/dbos_worker.py) keeps its state in a database of its
own on the bench's PostgreSQL server, `<bench database>_dbos`, which DBOS
creates and migrates at its first launch. Tickets go in through DBOS's own
client (`DBOSClient.enqueue_in_transaction`): a batch is enqueued in one
transaction, as our `task_create` creates a task's items in one. Workflow
ids are `<run tag>-<n>`, so a run's workflows are found by their prefix.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dj_database_url
import sqlalchemy as sa

from ops.bench.dbos_worker import APP_NAME, APP_VERSION, QUEUE, WORKFLOW
from ops.bench.workload import ticket_dict
from ops.processes import Child, database_url

if TYPE_CHECKING:
    from ops.bench.runner import Bench


def dbos_database_url() -> str:
    """The peer's database: the bench database's server, `<name>_dbos`."""
    base = database_url()
    db = dj_database_url.parse(base)
    if db["HOST"].startswith("/"):  # a unix socket (the private server): SQLAlchemy, as DBOS reads it, wants ?host=
        auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
        return f"postgresql://{auth}@/{db['NAME']}_dbos?host={db['HOST']}"
    return base.rsplit("/", 1)[0] + f"/{db['NAME']}_dbos"


def dbos_database_name() -> str:
    return dj_database_url.parse(dbos_database_url())["NAME"]


@dataclass
class PeerRun:
    """One batch on the peer: when it was submitted, when its last workflow ended, how they ended."""

    tag: str
    n: int
    submitted: float
    ended: float = 0.0
    statuses: dict | None = None

    @property
    def items_per_s(self) -> float:
        return self.n / (self.ended - self.submitted)


class DbosPeer:
    """The peer's workers and database, driven from the bench process."""

    def __init__(self, bench: Bench):
        self.bench = bench
        self.url = dbos_database_url()
        self.engine: sa.Engine | None = None
        self.client = None

    def start(self, n: int, extra_env: dict | None = None) -> list[Child]:
        children = self.bench.procs.start_dbos_workers(n, self.url, extra_env)
        if self.engine is None:  # the first launch created the database
            from dbos import DBOSClient

            url = sa.make_url(self.url).set(drivername="postgresql+psycopg")
            self.engine = sa.create_engine(url, pool_size=1, max_overflow=0)
            self.client = DBOSClient(system_database_engine=self.engine, application_name=APP_NAME)
        return children

    def stop(self, children: list[Child]) -> None:
        self.bench.procs.stop_other_all(children)

    def close(self) -> None:
        if self.client is not None:
            self.client.destroy()
        if self.engine is not None:
            self.engine.dispose()
        self.engine = self.client = None

    def backend_pid(self) -> int:
        """The PostgreSQL backend of the bench's one connection to the peer's database."""
        with self.engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar())

    def forget_runs(self) -> None:
        """Delete the workflows of earlier runs (the tables stay)."""
        with self.engine.begin() as conn:
            conn.execute(sa.text("TRUNCATE dbos.workflow_status CASCADE"))

    def submit(self, rows, tag: str) -> PeerRun:
        """Enqueue one workflow per ticket, all in one transaction."""
        options = {"queue_name": QUEUE, "workflow_name": WORKFLOW, "app_version": APP_VERSION}
        started = time.time()
        with self.engine.begin() as conn:
            for i, row in enumerate(rows, 1):
                self.client.enqueue_in_transaction(conn, {**options, "workflow_id": f"{tag}-{i}"}, ticket_dict(row))
        return PeerRun(tag=tag, n=len(rows), submitted=started)

    def times(self, run: PeerRun) -> list[tuple[float, float]]:
        """Each successful workflow's (start, end) in seconds: dequeued, and ended, on DBOS's own clock."""
        query = sa.text("SELECT started_at_epoch_ms, updated_at FROM dbos.workflow_status "
                        "WHERE workflow_uuid LIKE :prefix AND status = 'SUCCESS' AND started_at_epoch_ms IS NOT NULL")
        with self.engine.connect() as conn:
            return [(a / 1000, b / 1000) for a, b in conn.execute(query, {"prefix": f"{run.tag}-%"}).all()]

    def wait(self, run: PeerRun, timeout: float, poll: float = 0.05) -> PeerRun:
        """Until every workflow of the run ended (SUCCESS, ERROR, …); the last
        one's end time is DBOS's own `updated_at`."""
        query = sa.text("SELECT status, count(*), max(updated_at) FROM dbos.workflow_status "
                        "WHERE workflow_uuid LIKE :prefix GROUP BY status")
        deadline = time.monotonic() + timeout
        while True:
            with self.engine.connect() as conn:
                rows = conn.execute(query, {"prefix": f"{run.tag}-%"}).all()
            statuses = {status: n for status, n, _ in rows}
            open_ = sum(n for status, n in statuses.items() if status in ("ENQUEUED", "PENDING", "DELAYED"))
            if sum(statuses.values()) >= run.n and not open_:
                run.statuses = statuses
                run.ended = max(last for _, _, last in rows) / 1000
                return run
            if time.monotonic() > deadline:
                raise TimeoutError(f"DBOS peer, run {run.tag}: {statuses} after {timeout:.0f}s; "
                                   f"see {self.bench.workdir}")
            time.sleep(poll)
