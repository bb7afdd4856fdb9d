"""Supervision of child processes: start them, watch them, stop them with whatever they leave behind.

One module for every place that runs the product's processes from outside:
`make run` (scripts/run.py), the kill test, the benchmarks and the test
suite's fixtures. Plain Python and psutil: it imports without Django
configured (`database_url()` is the one function that needs Django).

    procs = Processes(env=env, log_dir=workdir)        # one owner, many children
    worker = procs.start("worker", [sys.executable, "manage.py", "worker"])
    procs.kill(worker)                                 # SIGKILL, work-horse too
    worker = procs.restart(worker)                     # same command, same log
    sandbox = start_sandbox(procs, db=workdir / "sandbox.sqlite3")   # ops.sandbox_child
    left = procs.stop()                                # SIGTERM, grace, SIGKILL, orphans

A child's output goes to a log file, or (`stream=True`) to our stdout line by
line with a `name |` prefix, each line also handed to an optional callback.
Every child carries the owner's token in the environment variable
`TICKETAGENT_SUPERVISORS` (nested owners add theirs), and so does everything
it starts: rq's work-horses, which rq puts in a session of their own and which
outlive a SIGKILLed parent, are found by that mark and killed too. (`SPT_NOENV`
keeps setproctitle, which rq uses when it is installed, from overwriting the
environment block that the mark is read from.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import psutil

ROOT = Path(__file__).resolve().parent.parent
MARK_ENV = "TICKETAGENT_SUPERVISORS"
PALETTE = ("36", "33", "35", "32", "34", "96", "93", "95")
KEPT_LINES = 1000  # the first lines of a streamed child, for wait_line()

_print_lock = threading.Lock()


def say(message: str = "") -> None:
    """Print one whole line to stdout, from any thread (children's lines included)."""
    with _print_lock:
        try:
            sys.stdout.write(message + "\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError):
            pass


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-returncode).name}"
        return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.pid} {' '.join(proc.cmdline())[:100]}"
    except psutil.Error:
        return str(proc.pid)


def database_url() -> str:
    """The URL of the database this (Django) process uses, for its children."""
    from django.db import connection

    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    host = db["HOST"] or "127.0.0.1"
    if host.startswith("/"):  # a unix socket's folder (the private server of ops/pgserver.py)
        server = quote(host, safe="") + (f":{db['PORT']}" if db["PORT"] else "")
    else:
        server = f"{host}:{db['PORT'] or 5432}"
    return f"postgres://{auth}@{server}/{db['NAME']}"


_prctl = None


def _load_prctl():
    global _prctl
    if _prctl is None and sys.platform.startswith("linux"):
        try:
            import ctypes

            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            _prctl = False
    return _prctl or None


def die_with_parent_preexec():
    """A ``preexec_fn`` that makes the child get SIGTERM when we die (Linux), or None.

    So even a SIGKILLed ``make run`` leaves no server or worker behind.
    """
    prctl = _load_prctl()
    if prctl is None:
        return None

    def _preexec():
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    return _preexec


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def wait_port(port: int, timeout: float = 60.0, *, host: str = "127.0.0.1",
              check: Callable[[], None] | None = None) -> bool:
    """True once something accepts connections on `port`; `check` runs between tries
    (it may raise, e.g. when a child died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check is not None:
            check()
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return True
        time.sleep(0.2)
    return False


class Survived(RuntimeError):
    """Processes outlived SIGKILL."""


def alive(pid: int, *, group: bool = False) -> bool:
    """Whether process `pid` (with `group`, any process of the group it leads) still exists."""
    try:
        os.killpg(pid, 0) if group else os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_gone(pid: int, group: bool, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid, group=group) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid, group=group)


def stop_popen(proc: subprocess.Popen, *, grace: float = 10.0, group: bool = False) -> int | None:
    """Stop a server started outside `Processes` (one that must outlive a Ctrl-C
    of ours, in a session of its own: Redis, Request Tracker): SIGTERM, up to
    `grace` seconds, then SIGKILL -- with `group`, to every process of the
    group it leads, all of which must be gone (`Survived` if not). Its exit status."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    if group and not _wait_gone(proc.pid, True, grace):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    proc.wait(timeout=max(grace, 10))
    if group and not _wait_gone(proc.pid, True, max(grace, 10)):
        raise Survived(f"processes of group {proc.pid} ({proc.args[0]}) outlived SIGKILL")
    return proc.returncode


def stop_pid(pid: int, *, grace: float = 10.0) -> bool:
    """SIGTERM a process we did not start as a child (a daemon by its pid
    file), SIGKILL after `grace` seconds; True once it is gone."""
    if not alive(pid):
        return True
    os.kill(pid, signal.SIGTERM)
    if _wait_gone(pid, False, grace):
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return _wait_gone(pid, False, 1.0)


class StartError(RuntimeError):
    """A child exited before it was ready (`exited`), or was not ready in time."""

    def __init__(self, message: str, child: Child, *, exited: bool):
        super().__init__(message)
        self.child = child
        self.exited = exited


@dataclass
class Spec:
    """What it takes to start a child (again)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path | None  # None: streamed to our stdout
    on_line: Callable[[str], None] | None = None
    color: str = ""


@dataclass(eq=False)
class Child:
    """One started process: its spec, its Popen, and what it printed."""

    spec: Spec
    proc: subprocess.Popen
    pump: threading.Thread | None = None
    lines: list[str] = field(default_factory=list)  # streamed children only: the first KEPT_LINES

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def log_path(self) -> Path | None:
        return self.spec.log

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout=timeout)

    def tree(self) -> list[psutil.Process]:
        """The process and its descendants, while it runs."""
        if self.proc.poll() is not None:
            return []
        try:
            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def signal(self, sig: int, *, descendants: bool = True) -> None:
        """Signal the process and (unless descendants=False) everything under it
        (rq's work-horse lives in a session of its own: a group kill misses it)."""
        targets = self.tree()[1:] if descendants else []
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
        for proc in targets:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)

    def tail(self, chars: int = 4000) -> str:
        if self.log_path is None:
            return "\n".join(self.lines[-20:])
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def printed(self) -> list[str]:
        """The whole lines it printed so far (from its log, or kept from its stream)."""
        if self.log_path is None:
            return list(self.lines)
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return text.splitlines()[: text.count("\n")]

    def wait_line(self, match: Callable[[str], bool], timeout: float) -> str:
        """The first line it prints that `match`es; StartError if it exits first
        or `timeout` seconds pass."""
        deadline = time.monotonic() + timeout
        while True:
            exited = self.proc.poll() is not None
            if exited and self.pump is not None:
                self.pump.join(timeout=1)  # the last lines, before judging
            line = next((text for text in self.printed() if match(text)), None)
            if line is not None:
                return line
            if exited:
                raise StartError(f"{self.name} exited ({describe_exit(self.proc.returncode)}) before it was "
                                 f"ready:\n{self.tail()}", self, exited=True)
            if time.monotonic() >= deadline:
                raise StartError(f"{self.name} was not ready within {timeout:.0f}s:\n{self.tail()}", self,
                                 exited=False)
            time.sleep(0.05)

    def pump_output(self, echo: Callable[[str], None]) -> None:
        """Show each line with a `name |` prefix (the thread body of streamed children)."""
        prefix = f"{self.name:>9} | "
        if self.spec.color:
            prefix = f"\033[{self.spec.color}m{prefix}\033[0m"
        for raw in iter(self.proc.stdout.readline, b""):
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            if self.spec.on_line is not None:
                with contextlib.suppress(Exception):
                    self.spec.on_line(text)
            if len(self.lines) < KEPT_LINES:
                self.lines.append(text)
            echo(prefix + text)
        with contextlib.suppress(OSError):
            self.proc.stdout.close()


class Processes:
    """The children of one owner, marked so that nothing they start escapes.

    `env`: the children's base environment (default: ours); `cwd`: where they
    run (default: the project); `log_dir`: where their logs go;
    `new_session`: each child in a session of its own, away from a terminal's
    Ctrl-C (`make run` wants them in its group instead); `preexec_fn` runs in
    each child before exec (`make run`: die with the parent); `echo` prints
    streamed lines; `color`: colour their prefixes.
    """

    def __init__(self, *, env: dict | None = None, cwd: Path = ROOT, log_dir: Path | None = None,
                 new_session: bool = True, preexec_fn: Callable[[], None] | None = None,
                 echo: Callable[[str], None] = say, color: bool = False):
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd
        self.log_dir = log_dir
        self.new_session = new_session
        self.preexec_fn = preexec_fn
        self.echo = echo
        self.color = color
        self.token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.children: list[Child] = []
        self.started: Counter = Counter()

    # -- starting ------------------------------------------------------------
    def start(self, name: str, argv: list[str], *, env: dict | None = None, log: Path | None = None,
              stream: bool = False, on_line: Callable[[str], None] | None = None) -> Child:
        """Start `argv` as child `name`, its environment our base `env` plus
        this `env`. Output: `stream=True` shows it (`on_line` sees each line);
        else it goes to `log`, by default `<log_dir>/<name>-<n>.log`."""
        self.started[name] += 1
        if not stream and log is None:
            if self.log_dir is None:
                raise ValueError(f"{name}: no log file and no log_dir to put one in")
            log = self.log_dir / f"{name}-{self.started[name]}.log"
        marks = f"{self.env.get(MARK_ENV, '')} {self.token}".strip()
        # SPT_NOENV: rq sets its process titles with setproctitle where that is
        # installed, which otherwise overwrites /proc/<pid>/environ, mark included
        child_env = {**self.env, **(env or {}), "PYTHONUNBUFFERED": "1", "SPT_NOENV": "1", MARK_ENV: marks}
        color = PALETTE[(sum(self.started.values()) - 1) % len(PALETTE)] if self.color else ""
        spec = Spec(name, list(argv), child_env, None if stream else Path(log), on_line, color)
        return self._launch(spec)

    def _launch(self, spec: Spec, append: bool = False) -> Child:
        common = dict(cwd=str(self.cwd), env=spec.env, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                      start_new_session=self.new_session, preexec_fn=self.preexec_fn)
        if spec.log is None:
            child = Child(spec, subprocess.Popen(spec.argv, stdout=subprocess.PIPE, **common))
            child.pump = threading.Thread(target=child.pump_output, args=(self.echo,), name=f"out-{spec.name}",
                                          daemon=True)
            child.pump.start()
        else:
            spec.log.parent.mkdir(parents=True, exist_ok=True)
            with open(spec.log, "ab" if append else "wb") as log:
                child = Child(spec, subprocess.Popen(spec.argv, stdout=log, **common))
        self.children.append(child)
        return child

    def restart(self, child: Child) -> Child:
        """Start `child`'s command again, in its place (its log is appended to)."""
        self.forget(child)
        return self._launch(child.spec, append=True)

    def forget(self, child: Child) -> None:
        with contextlib.suppress(ValueError):
            self.children.remove(child)

    def dead(self) -> list[Child]:
        """Children that exited by themselves (killed or stopped ones are forgotten)."""
        return [c for c in self.children if c.poll() is not None]

    def live(self) -> list[Child]:
        return [c for c in self.children if c.poll() is None]

    # -- killing ---------------------------------------------------------------
    def kill(self, child: Child, sig: int = signal.SIGKILL, *, descendants: bool = True,
             wait: float = 10.0) -> None:
        """Signal `child` (and unless descendants=False its descendants), wait
        for it; once it is gone it is forgotten."""
        child.signal(sig, descendants=descendants)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=wait)
        if child.poll() is not None:
            self.forget(child)

    def marked(self) -> list[psutil.Process]:
        """Every running process that carries our mark: children, their descendants, orphans."""
        found = []
        for proc in psutil.process_iter(["environ"]):
            try:
                env = proc.info["environ"] or {}
                if self.token in env.get(MARK_ENV, "").split() and proc.pid != os.getpid() \
                        and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    def strays(self, keep: Iterable[Child] = ()) -> list[psutil.Process]:
        """Marked processes outside the trees of the running children in `keep`."""
        kept = {p.pid for c in keep for p in c.tree()}
        return [p for p in self.marked() if p.pid not in kept]

    def orphans(self) -> list[psutil.Process]:
        """Marked processes that none of our running children accounts for:
        e.g. a work-horse whose worker was SIGKILLed."""
        return self.strays(self.live())

    # -- stopping --------------------------------------------------------------
    def stop(self, children: Iterable[Child] | None = None, *, grace: float = 10.0, descendants: bool = True,
             hurry: Callable[[], bool] | None = None, report: Callable[[str], None] | None = None) -> list[str]:
        """Stop `children` (default: all) and every marked process the others
        do not account for: SIGTERM (to each child alone with
        descendants=False, so an rq worker may finish its job), up to `grace`
        seconds (less once `hurry()` says so), then SIGKILL. The stopped
        children are forgotten. Returns what is still running after that."""
        targets = list(self.children if children is None else children)
        others = [c for c in self.children if c not in targets]
        target_pids = {p.pid for c in targets for p in c.tree()}
        orphans = [p for p in self.strays(others) if p.pid not in target_pids]
        for child in targets:
            child.signal(signal.SIGTERM, descendants=descendants)
        for proc in orphans if descendants else []:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and not (hurry is not None and hurry()):
            if all(c.poll() is not None for c in targets) and not self.strays(others):
                break
            time.sleep(0.1)
        return self._finish(targets, others, grace, report)

    def _finish(self, targets: list[Child], others: list[Child], grace: float,
                report: Callable[[str], None] | None) -> list[str]:
        """stop()'s end: SIGKILL what is left, reap, say what survived."""
        for child in targets:
            if child.poll() is None:
                if report is not None:
                    report(f"{child.name} did not stop within {grace:.0f}s; killing it")
                child.signal(signal.SIGKILL)
        for proc in self.strays(others):
            with contextlib.suppress(psutil.Error):
                proc.kill()
        for child in targets:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)
            if child.pump is not None:
                child.pump.join(timeout=2)
            self.forget(child)
        deadline = time.monotonic() + 2
        left = self.strays(others)
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = self.strays(others)
        return [describe(p) for p in left]
