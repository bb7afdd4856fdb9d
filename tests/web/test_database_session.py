"""The database sessions bind parameters on the server and keep a statement prepared once it has run
DB_PREPARE_THRESHOLD times (docs/deploy.md): a worker's phases are parsed once per session; a worker's session
plans them once too, or at every run on a server with autovacuum off (ticketagent/scheduling/db_sessions.py)."""

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def test_statements_are_bound_by_the_server_and_prepared_after_five_runs():
    connection.ensure_connection()
    assert connection.connection.prepare_threshold == 5
    for n in range(7):
        with connection.cursor() as cursor:
            cursor.execute("SELECT %s::int + 1 AS prepared_check", [n])
            assert cursor.fetchone() == (n + 1,)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
                       ["%prepared_check%"])
        assert cursor.fetchone()[0] == 1


@pytest.fixture
def worker_sessions():
    """This process's new sessions get the worker's settings (ticketagent/scheduling/db_sessions.py), as `manage.py
    worker` makes them; afterwards, plain sessions again."""
    from django.db import connections
    from django.db.backends.signals import connection_created

    from ticketagent.scheduling import db_sessions

    db_sessions.session_limits("worker")
    try:
        yield
    finally:
        db_sessions._ROLE.clear()
        connection_created.disconnect(dispatch_uid="ticketagent.scheduling.db_sessions")
        for conn in connections.all():
            conn.close()


def _plans_of(cursor, marker: str) -> tuple[int, int]:
    """Generic and custom plans made so far for this session's prepared statement containing `marker`."""
    cursor.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE %s",
                   [f"%{marker}%"])
    return cursor.fetchone()


@pytest.mark.django_db(transaction=True)
def test_a_worker_session_plans_at_every_run_when_autovacuum_is_off(worker_sessions, settings):
    """DB_PLAN_CACHE_MODE unset: the server's `auto` where autovacuum keeps plans fresh, `force_custom_plan` where
    nothing does."""
    settings.DB_PLAN_CACHE_MODE = ""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('autovacuum'), current_setting('plan_cache_mode')")
        autovacuum, mode = cursor.fetchone()
    assert mode == ("auto" if autovacuum == "on" else "force_custom_plan")


@pytest.mark.django_db(transaction=True)
def test_a_worker_session_planning_every_run_makes_no_generic_plan(worker_sessions, settings):
    """A generic plan made while a table holds three rows is a sequential scan, kept until an ANALYZE however
    large the table grows; planning every run, a worker's session never makes one. The same statement in the same
    session in the server's default mode does (the check can fail)."""
    settings.DB_PLAN_CACHE_MODE = "force_custom_plan"
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        assert cursor.fetchone() == ("force_custom_plan",)
        cursor.execute("CREATE TEMPORARY TABLE plan_probe (id bigint PRIMARY KEY, v text)")
        cursor.execute("INSERT INTO plan_probe SELECT g, 'x' FROM generate_series(1, 3) g")
        for n in range(12):
            cursor.execute("SELECT v AS worker_mode FROM plan_probe WHERE id = %s", [n % 3 + 1])
        generic, custom = _plans_of(cursor, "worker_mode")
        assert generic == 0 and custom >= 5  # prepared after 5 runs (the threshold), planned at each one since

        cursor.execute("SET plan_cache_mode = auto")
        for n in range(12):
            cursor.execute("SELECT v AS default_mode FROM plan_probe WHERE id = %s", [n % 3 + 1])
        generic, custom = _plans_of(cursor, "default_mode")
        assert generic > 0, "the server's default mode made no generic plan: this test shows nothing"


def test_worker_and_sweep_sessions_mirror_the_clients_keepalives_on_the_server():
    """The server watches a worker's or the sweep's session as the client does (the values it sets per session;
    tests/deploy/test_lost_host_sessions.py cuts a host off and watches its sessions end within the bound)."""
    from ticketagent.scheduling.db_sessions import lost_client_seconds, session_settings

    options = {"keepalives_idle": 10, "keepalives_interval": 3, "keepalives_count": 3, "tcp_user_timeout": 20000}
    for role in ("worker", "sweep"):
        values = session_settings(role, options)
        assert {k: values[k] for k in ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count",
                                       "tcp_user_timeout")} == {"tcp_keepalives_idle": "10s",
                                                                "tcp_keepalives_interval": "3s",
                                                                "tcp_keepalives_count": "3",
                                                                "tcp_user_timeout": "20000ms"}
    # Linux: with tcp_user_timeout, dropped at the first probe past it (10 + 3 x 4); without, after the count
    assert lost_client_seconds(options) == 22
    assert lost_client_seconds({**options, "tcp_user_timeout": 0}) == 19
    assert lost_client_seconds({**options, "tcp_user_timeout": 5000}) == 13  # at least one probe goes out
