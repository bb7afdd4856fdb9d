"""ops/faultproxy.py against the real PostgreSQL: stalled answers come late while the write is already committed;
a silent cut leaves the client waiting, the server's session alive, until heal closes it."""

import threading
import time
import uuid

import psycopg
import pytest
from django.db import connection

from ops.faultproxy import FaultProxy, database_server

pytestmark = pytest.mark.django_db(transaction=True)

STALL = 2.0


def _dsn(host: str, port: int, **extra) -> str:
    db = connection.settings_dict
    parts = {"host": host, "port": port, "dbname": db["NAME"], "user": db["USER"] or "postgres",
             "password": db.get("PASSWORD") or "", **extra}
    return " ".join(f"{k}={v}" for k, v in parts.items() if v != "")


@pytest.fixture
def pg():
    """The test database directly, a probe table in it, and a proxy in front of it."""
    db = connection.settings_dict
    direct = psycopg.connect(_dsn(db["HOST"] or "127.0.0.1", db["PORT"] or 5432), autocommit=True)
    direct.execute("CREATE TABLE IF NOT EXISTS faultproxy_probe (tag text)")
    proxy = FaultProxy(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432))
    port = proxy.start()
    try:
        yield direct, proxy, lambda **extra: psycopg.connect(_dsn("127.0.0.1", port, **extra), autocommit=True)
    finally:
        proxy.close()
        direct.execute("DROP TABLE IF EXISTS faultproxy_probe")
        direct.close()


def _in_thread(fn):
    box = {}

    def body():
        try:
            box["value"] = fn()
        except Exception as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc
        box["done"] = time.monotonic()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, box


def _committed(direct, tag: str) -> bool:
    return direct.execute("SELECT count(*) FROM faultproxy_probe WHERE tag = %s", (tag,)).fetchone()[0] == 1


def _wait_committed(direct, tag: str, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _committed(direct, tag):
            return True
        time.sleep(0.05)
    return False


class TestStall:
    def test_the_answer_comes_late_and_the_row_is_committed_before_it(self, pg):
        direct, proxy, connect = pg
        client = connect()
        tag = uuid.uuid4().hex
        proxy.stall(STALL)
        started = time.monotonic()
        thread, box = _in_thread(lambda: client.execute("INSERT INTO faultproxy_probe VALUES (%s)", (tag,)))
        assert _wait_committed(direct, tag), "the stalled statement never reached PostgreSQL"
        assert thread.is_alive(), "the answer arrived although the proxy was stalling"
        thread.join(STALL + 5)
        assert "error" not in box, box
        assert box["done"] - started >= STALL
        assert proxy.counts["answers held"] >= 1 and proxy.events[0]["event"] in ("connect", "stall")
        client.close()

    def test_stall_next_holds_only_the_answer_to_the_matching_statement_on_its_connection(self, pg):
        direct, proxy, connect = pg
        client, other = connect(), connect()
        tag = uuid.uuid4().hex
        seen = []
        proxy.stall_next(b"INSERT INTO faultproxy_probe", STALL, on_match=lambda: seen.append(time.monotonic()))
        assert client.execute("SELECT 1").fetchone() == (1,)  # not the pattern: answered at once
        started = time.monotonic()
        thread, box = _in_thread(lambda: client.execute("INSERT INTO faultproxy_probe VALUES (%s)", (tag,)))
        assert _wait_committed(direct, tag)
        assert other.execute("SELECT 2").fetchone() == (2,)  # another connection is not held
        assert thread.is_alive()
        thread.join(STALL + 5)
        assert "error" not in box, box
        assert box["done"] - started >= STALL
        assert len(seen) == 1
        # armed once: the next insert on the same connection goes through
        thread, box = _in_thread(lambda: client.execute("INSERT INTO faultproxy_probe VALUES ('again')"))
        thread.join(STALL + 5)
        assert "error" not in box and box["done"] - started >= STALL
        assert proxy.counts["aimed stall"] == 1
        client.close()
        other.close()

    def test_an_empty_pattern_is_refused(self, pg):
        _, proxy, _ = pg
        with pytest.raises(ValueError, match="pattern is empty"):
            proxy.stall_next(b"", 1)
        with pytest.raises(ValueError, match="pattern is empty"):
            proxy.stall_next((b"INSERT", b""), 1)

    def test_a_tuple_of_patterns_aims_at_the_chunk_that_holds_them_all(self, pg):
        direct, proxy, connect = pg
        client = connect()
        proxy.stall_next((b"INSERT INTO faultproxy_probe", b"second"), STALL)
        started = time.monotonic()
        client.execute("INSERT INTO faultproxy_probe VALUES ('first')")
        assert proxy.counts["aimed stall"] == 0  # the first insert does not hold "second"
        client.execute("INSERT INTO faultproxy_probe VALUES ('second')")
        assert time.monotonic() - started >= STALL and proxy.counts["aimed stall"] == 1
        client.close()


class TestDrop:
    def test_a_silent_cut_leaves_the_client_waiting_and_the_server_session_alive(self, pg):
        direct, proxy, connect = pg
        name = f"fp-{uuid.uuid4().hex[:8]}"
        client = connect(application_name=name)
        assert client.execute("SELECT 1").fetchone() == (1,)
        proxy.drop()
        thread, box = _in_thread(lambda: client.execute("SELECT 1"))
        thread.join(STALL)
        assert thread.is_alive(), f"the client got an answer or an error through a cut link: {box}"
        sessions = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        assert direct.execute(sessions, (name,)).fetchone()[0] == 1  # no FIN reached the server
        # a new connection is accepted and never answered: the client's own timeout ends it
        with pytest.raises(psycopg.OperationalError):
            connect(connect_timeout=2)
        proxy.heal()
        thread.join(10)
        assert isinstance(box.get("error"), psycopg.OperationalError), box
        fresh = connect()
        assert fresh.execute("SELECT 3").fetchone() == (3,)
        deadline = time.monotonic() + 10
        while direct.execute(sessions, (name,)).fetchone()[0] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert direct.execute(sessions, (name,)).fetchone()[0] == 0  # heal closed the dead connection
        assert [e["event"] for e in proxy.events if e["event"] in ("drop", "heal")] == ["drop", "heal"]
        fresh.close()


@pytest.mark.parametrize("url,server", [
    ("postgres://postgres@%2Ftmp%2FWork%2Fvar%2Fpostgres/ticketagent", ("/tmp/Work/var/postgres", 5432)),
    ("postgres://postgres@%2Ftmp%2Fpg:5433/ticketagent", ("/tmp/pg", 5433)),
    ("postgres://u:p%40ss@db.example.com:6543/ticketagent", ("db.example.com", 6543)),
    ("postgres://u@[::1]:5434/x", ("::1", 5434)),
    ("postgres://u@[::1]/x", ("::1", 5432)),
    ("postgres:///ticketagent", ("127.0.0.1", 5432)),
])
def test_the_proxy_finds_the_server_a_database_url_names(url, server):
    """The private server's URL names a unix socket folder, percent-encoded and case-sensitive: the kill test's
    proxies forwarded to nothing while they read it with urlsplit().hostname."""
    assert database_server(url) == server


def test_a_url_through_the_proxy_keeps_user_password_and_database():
    proxy = FaultProxy.in_front_of("postgres://u:p%40ss@%2Ftmp%2Fpg/db?sslmode=disable")
    proxy.port = 40001
    assert proxy.target == ("/tmp/pg", 5432)
    assert proxy.url("postgres://u:p%40ss@%2Ftmp%2Fpg/db?sslmode=disable") == (
        "postgres://u:p%40ss@127.0.0.1:40001/db?sslmode=disable")
