#!/usr/bin/env python3
"""``make mutation``: cosmic-ray over the dedupe gate and the ledger's services.

    mutation.py                 a new session: every mutant of MODULES
    mutation.py --survivors     run the last session's survivors again against
                                the current tests (after adding tests; the
                                mutated modules must be unchanged)
    mutation.py --report-only   print the last session's survivors again

How a session runs:

1. The checkout's files (``git ls-files``, as they are on disk) are copied
   to ``var/mutation/tree``: cosmic-ray rewrites a module in place for each
   mutant, so it never touches the files you edit, and the processes a test
   starts there (the sandbox, racing ``python -c`` processes) import the
   mutant too.
2. ``cosmic-ray init`` and ``baseline`` (the unmutated code must pass).
3. Every mutant runs ``scripts/run_tests.py tests/ledger -x -m "not slow"``
   in the copy; every mutant that survives that runs the whole of
   ``tests/ledger`` (with the multi-process race tests, ``slow``). Each run
   has a Redis server of its own (TICKETAGENT_REDIS_SERVER=system) and the
   PostgreSQL of TEST_DATABASE_URL, else the checkout's private server
   (var/postgres, ops/pgserver.py), started once for the session and stopped
   at its end (``--reuse-db`` keeps the test database between mutants).
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

WORK = ROOT / "var" / "mutation"
TREE = WORK / "tree"
SESSION = WORK / "session.sqlite"
REPORT = WORK / "report.txt"
MODULES_HASH = WORK / "modules.sha256"
MODULES = ("ledger/gate.py", "ledger/statements.py", "ledger/services.py")
TESTS = "tests/ledger"
TIMEOUT_SECONDS = 300
QUICK, FULL = "quick", "full"


def copy_tree() -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    if TREE.exists():
        shutil.rmtree(TREE)
    for name in filter(None, files.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (TREE / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, TREE / name)


def modules_hash() -> str:
    return hashlib.sha256(b"".join((ROOT / m).read_bytes() for m in MODULES)).hexdigest()


def write_config(kind: str) -> Path:
    selection = '-x -m "not slow"' if kind == QUICK else "-x"
    command = f"{sys.executable} scripts/run_tests.py {TESTS} {selection} -q -p no:cacheprovider --reuse-db"
    modules = ", ".join(f"'{TREE / m}'" for m in MODULES)
    config = WORK / f"cosmic-ray-{kind}.toml"
    config.write_text(
        "[cosmic-ray]\n"
        f"module-path = [{modules}]\n"
        f"timeout = {TIMEOUT_SECONDS}.0\n"
        "excluded-modules = []\n"
        f"test-command = '{command}'\n\n"
        "[cosmic-ray.distributor]\n"
        "name = 'local'\n"
    )
    return config


def tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "TICKETAGENT_REDIS_SERVER": os.environ.get("TICKETAGENT_REDIS_SERVER", "system")}
    return subprocess.run(args, cwd=TREE, env=env, **kwargs)


def forget_survivors() -> int:
    """Drop the survivors' results, so that `exec` runs them again."""
    with sqlite3.connect(SESSION) as db:
        return db.execute("DELETE FROM work_results WHERE test_outcome = 'SURVIVED'").rowcount


def run_survivors_in_full() -> None:
    print(f"mutation: {forget_survivors()} survivor(s) run against the whole of {TESTS}", flush=True)
    run(tool("cosmic-ray"), "exec", str(write_config(FULL)), str(SESSION), check=True)


def report() -> None:
    """Every surviving mutant with its diff, then cosmic-ray's totals."""
    text = run(tool("cr-report"), "--show-diff", "--surviving-only", str(SESSION),
               capture_output=True, text=True).stdout
    REPORT.write_text(text)
    print(text)
    print(f"(saved in {REPORT.relative_to(ROOT)})")


def new_session() -> int:
    WORK.mkdir(parents=True, exist_ok=True)
    copy_tree()
    SESSION.unlink(missing_ok=True)
    MODULES_HASH.write_text(modules_hash())
    run(tool("cosmic-ray"), "init", str(write_config(QUICK)), str(SESSION), check=True)
    if run(tool("cosmic-ray"), "baseline", str(write_config(FULL))).returncode != 0:
        print("mutation: the tests fail on the unmutated code; fix that first", file=sys.stderr)
        return 1
    run(tool("cosmic-ray"), "exec", str(write_config(QUICK)), str(SESSION), check=True)
    run_survivors_in_full()
    report()
    return 0


def survivors_again() -> int:
    if not MODULES_HASH.exists() or MODULES_HASH.read_text() != modules_hash():
        print(f"mutation: {', '.join(MODULES)} changed since the session began; run a new one",
              file=sys.stderr)
        return 1
    copy_tree()
    run_survivors_in_full()
    report()
    return 0


def main(argv: list[str]) -> int:
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
