"""The database sessions bind parameters on the server and keep a statement prepared once it has run
DB_PREPARE_THRESHOLD times (docs/deploy.md): a worker's phases are parsed and planned once per session."""

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
