#!/usr/bin/env python3
"""``make mutation``: cosmic-ray over the dedupe gate and the ledger's services.

MUTATION_MODULES (comma-separated; default: gate.py, statements.py and
services.py of ledger/) picks the modules to mutate.

    mutation.py                 a new session: every mutant of MODULES
    mutation.py --survivors     run the last session's survivors again against
                                the current tests (after adding tests; the
                                mutated modules must be unchanged)
    mutation.py --report-only   print the last session's survivors again

How a session runs:

1. The checkout's files (``git ls-files``, as they are on disk) are copied
   to ``var/mutation/tree-N``, one copy per job (MUTATION_JOBS, default: the
   number of CPUs): cosmic-ray rewrites a module in place for each mutant,
   so it never touches the files you edit, and the processes a test starts
   there (the sandbox, racing ``python -c`` processes) import the mutant too.
2. ``cosmic-ray init`` and ``baseline`` (the unmutated code must pass).
3. Every mutant runs ``scripts/run_tests.py <the gate's own tests first>
   tests/ledger -x -m "not slow"`` in a copy (most mutants fail within the
   first seconds); every mutant that survives that runs the whole of
   ``tests/ledger`` (with the multi-process race tests, ``slow``). With more
   than one job, each copy is served by a ``cosmic-ray http-worker`` of its
   own with a test database of its own (TEST_DATABASE_URL's name plus
   ``_mN``). Each run has a Redis server of its own
   (TICKETAGENT_REDIS_SERVER=system) and the PostgreSQL of
   TEST_DATABASE_URL, else the checkout's private server (var/postgres,
   ops/pgserver.py), started once for the session and stopped at its end.
   The test databases are created afresh for each stage and kept between
   its mutants (``--reuse-db``).
4. Prints the diff of every surviving mutant and cosmic-ray's totals.
   Survivors are killed by a test or listed with their reason in
   docs/testing.md ("Equivalent mutants").

The session (``var/mutation/session.sqlite``) and the report
(``var/mutation/report.txt``) stay for reading. Exit status 0 once the run
finished, whatever survived; 1 if the baseline fails or --survivors finds
the mutated modules changed since the session began.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ops import pgserver  # noqa: E402
from ops.processes import port_is_free, stop_popen, wait_port  # noqa: E402

WORK = ROOT / "var" / "mutation"
SESSION = WORK / "session.sqlite"
REPORT = WORK / "report.txt"
MODULES_HASH = WORK / "modules.sha256"
DEFAULT_MODULES = ("ledger/gate.py", "ledger/statements.py", "ledger/services.py")
# MUTATION_MODULES="ledger/gate.py,ledger/statements.py": a session over some of them
MODULES = tuple(m.strip() for m in os.environ.get("MUTATION_MODULES", "").split(",") if m.strip()) or DEFAULT_MODULES
TESTS = "tests/ledger"
# Run first, so that a mutant of the gate is usually killed within seconds (-x);
# pytest collects each of them once, then the rest of TESTS.
FIRST = (
    "tests/ledger/test_gate_three_calls.py",
    "tests/ledger/test_gate_values.py",
    "tests/ledger/test_gate_retry.py",
    "tests/ledger/test_gate_stale_lease_token.py",
    "tests/ledger/test_blocked_intents.py",
    "tests/ledger/test_review_verdicts.py",
    "tests/ledger/test_reconcile.py",
)
TIMEOUT_SECONDS = 300
QUICK, FULL = "quick", "full"
FIRST_PORT = 9871


def jobs() -> int:
    raw = os.environ.get("MUTATION_JOBS", "").strip() or str(os.cpu_count() or 1)
    if not raw.isdigit() or int(raw) < 1:
        raise SystemExit(f"mutation: MUTATION_JOBS={raw!r} is not a whole number of at least 1")
    return int(raw)


def tree(n: int = 0) -> Path:
    return WORK / f"tree-{n}"


def copy_tree(n: int) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    target = tree(n)
    if target.exists():
        shutil.rmtree(target)
    for name in filter(None, files.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def modules_hash() -> str:
    return hashlib.sha256(b"".join((ROOT / m).read_bytes() for m in MODULES)).hexdigest()


def write_config(kind: str, workers: int = 1) -> Path:
    """Module paths are relative: each worker mutates the copy it runs in."""
    selection = '-x -m "not slow"' if kind == QUICK else "-x"
    command = (f"{sys.executable} scripts/run_tests.py {' '.join(FIRST)} {TESTS} {selection} "
               "-q -p no:cacheprovider -p no:randomly -p no:xdist --reuse-db")
    modules = ", ".join(f"'{m}'" for m in MODULES)
    if workers == 1:
        distributor = "[cosmic-ray.distributor]\nname = 'local'\n"
    else:
        urls = ", ".join(f"'http://127.0.0.1:{FIRST_PORT + n}'" for n in range(workers))
        distributor = (f"[cosmic-ray.distributor]\nname = 'http'\n\n"
                       f"[cosmic-ray.distributor.http]\nworker-urls = [{urls}]\n")
    config = WORK / f"cosmic-ray-{kind}.toml"
    config.write_text(
        "[cosmic-ray]\n"
        f"module-path = [{modules}]\n"
        f"timeout = {TIMEOUT_SECONDS}.0\n"
        "excluded-modules = []\n"
        f"test-command = '{command}'\n\n"
        + distributor
    )
    return config


def tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def worker_database(n: int) -> tuple[str, str]:
    """Worker n's database server URL (up to the name) and database name: TEST_DATABASE_URL's, plus `_mN`
    for every worker but the first."""
    server, _, name = os.environ["TEST_DATABASE_URL"].rpartition("/")
    name = name or "ticketagent"
    return server, f"{name}_m{n}" if n else name


def environment(n: int = 0) -> dict:
    """Worker n's environment: a Redis server per run, a test database per worker."""
    server, name = worker_database(n)
    return {**os.environ, "TICKETAGENT_REDIS_SERVER": os.environ.get("TICKETAGENT_REDIS_SERVER", "system"),
            "TEST_DATABASE_URL": f"{server}/{name}"}


def run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=tree(0), env=environment(0), **kwargs)


def drop_test_databases(workers: int) -> None:
    """Each worker's test database is dropped before a stage: a run stopped mid-test (a timeout, a
    Ctrl-C) leaves rows behind, and with `--reuse-db` the next runs would fail on them, not on the
    mutant. The first run of each worker creates its database again."""
    import psycopg

    for n in range(workers):
        server, name = worker_database(n)
        with psycopg.connect(f"{server}/postgres", autocommit=True) as db:
            db.execute(f'DROP DATABASE IF EXISTS "test_{name}" WITH (FORCE)')  # pytest-django's test database


def execute(kind: str) -> None:
    """`cosmic-ray exec`: in tree 0 with one job, else through one http-worker per copy."""
    workers = jobs()
    drop_test_databases(workers)
    config = write_config(kind, workers)
    if workers == 1:
        run(tool("cosmic-ray"), "exec", str(config), str(SESSION), check=True)
        return
    for n in range(workers):
        if not port_is_free(FIRST_PORT + n):
            raise SystemExit(f"mutation: port {FIRST_PORT + n} is taken (a worker of an earlier session still "
                             f"running? `pkill -f 'cosmic-ray http-worker'`)")
    servers = []
    try:
        for n in range(workers):
            if not tree(n).exists():
                copy_tree(n)
            with (WORK / f"worker-{n}.log").open("ab") as log:
                servers.append(subprocess.Popen(
                    [tool("cosmic-ray"), "http-worker", "--port", str(FIRST_PORT + n)],
                    cwd=tree(n), env=environment(n), stdout=log, stderr=subprocess.STDOUT))
        for n, server in enumerate(servers):
            if not wait_port(FIRST_PORT + n, 30.0, check=lambda s=server, n=n: exited(s, n)):
                raise SystemExit(f"mutation: the worker for port {FIRST_PORT + n} did not listen within 30 s")
        run(tool("cosmic-ray"), "exec", str(config), str(SESSION), check=True)
    finally:
        for server in servers:
            stop_popen(server)


def exited(server: subprocess.Popen, n: int) -> None:
    if server.poll() is not None:
        raise SystemExit(f"mutation: the worker for port {FIRST_PORT + n} exited ({server.returncode}); "
                         f"see {WORK / f'worker-{n}.log'}")


def forget_survivors() -> int:
    """Drop the survivors' results (and those of runs a worker could not finish), so that `exec` runs them
    again."""
    with sqlite3.connect(SESSION) as db:
        return db.execute("DELETE FROM work_results WHERE test_outcome = 'SURVIVED' OR worker_outcome = 'ABNORMAL'"
                          " OR test_outcome IS NULL").rowcount


def run_survivors_in_full() -> None:
    print(f"mutation: {forget_survivors()} survivor(s) run against the whole of {TESTS}", flush=True)
    execute(FULL)


def report() -> None:
    """Every surviving mutant with its diff, then cosmic-ray's totals."""
    text = run(tool("cr-report"), "--show-diff", "--surviving-only", str(SESSION),
               capture_output=True, text=True).stdout
    REPORT.write_text(text)
    print(text)
    print(f"(saved in {REPORT.relative_to(ROOT)})")


def new_session() -> int:
    WORK.mkdir(parents=True, exist_ok=True)
    for n in range(jobs()):
        copy_tree(n)
    SESSION.unlink(missing_ok=True)
    MODULES_HASH.write_text(modules_hash())
    run(tool("cosmic-ray"), "init", str(write_config(QUICK)), str(SESSION), check=True)
    if run(tool("cosmic-ray"), "baseline", str(write_config(FULL))).returncode != 0:
        print("mutation: the tests fail on the unmutated code; fix that first", file=sys.stderr)
        return 1
    execute(QUICK)
    run_survivors_in_full()
    report()
    return 0


def survivors_again() -> int:
    if not MODULES_HASH.exists() or MODULES_HASH.read_text() != modules_hash():
        print(f"mutation: {', '.join(MODULES)} changed since the session began; run a new one",
              file=sys.stderr)
        return 1
    for n in range(jobs()):
        copy_tree(n)
    run_survivors_in_full()
    report()
    return 0


def main(argv: list[str]) -> int:
    missing = [m for m in MODULES if not (ROOT / m).is_file()]
    if missing:
        print(f"mutation: MUTATION_MODULES names no such file: {', '.join(missing)} (paths from the checkout's "
              f"top, e.g. ledger/gate.py)", file=sys.stderr)
        return 2
    if argv == ["--report-only"]:
        report()
        return 0
    if argv and argv != ["--survivors"]:
        print(__doc__, file=sys.stderr)
        return 2
    server = None
    if not os.environ.get("TEST_DATABASE_URL", "").strip():
        try:
            server = pgserver.start(ROOT / "var")
        except pgserver.NoPostgres as exc:
            print(f"mutation: {exc}", file=sys.stderr)
            return 1
        os.environ["TEST_DATABASE_URL"] = server.url
    try:
        return new_session() if not argv else survivors_again()
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
