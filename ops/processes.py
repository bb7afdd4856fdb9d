"""Helpers for commands that start and kill real worker processes (the kill
test, the benchmarks, the test suite)."""

import signal
import subprocess

import psutil
from django.db import connection


def database_url() -> str:
    """The URL of the database this process uses, for child processes."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def kill_tree(proc: subprocess.Popen, sig=signal.SIGKILL, *, children: bool = True, wait: float = 10) -> None:
    """Signal a worker and (unless children=False) its work-horse, which rq puts
    in a session of its own, so a process-group kill alone would miss it."""
    try:
        tree = [psutil.Process(proc.pid)] if proc.poll() is None else []
        if children:
            tree += psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    for p in tree:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
    try:
        proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        pass
