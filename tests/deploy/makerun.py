"""`make run` as a newcomer runs it: in a fresh copy of the checkout, from a terminal, stopped with Ctrl-C.

    stack = MakeRun.start(tmp_path, extra_env)   # copy, `make run` in a session of its own, wait for the banner
    stack.url, stack.login, stack.shell_env      # the dashboard, admin's password, the banner's second-shell line
    stack.ctrl_c(twice=True)                     # SIGINT to the whole foreground group, as a terminal sends it
    stack.wait(timeout)                          # make's exit status; stack.output() is everything it printed

The copy holds the checkout's files only (tracked and not ignored: no var/, no venv) and a `.venv` that points at
the venv `make run` would build from requirements.txt alone: TICKETAGENT_RUNTIME_VENV (`.ci/run` makes one from
requirements.txt alone), else this checkout's own.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ops.processes import free_port
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parent.parent.parent
# What a newcomer's shell does not have; settings of the suite's own that would leak into make run.
CLEARED = ("DATABASE_URL", "TEST_DATABASE_URL", "REDIS_URL", "DEBUG", "SECRET_KEY", "ALLOWED_HOSTS",
           "DJANGO_SETTINGS_MODULE", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "MODEL", "WORKERS", "RQ_QUEUE",
           "PORT", "HELPDESK_URL", "HELPDESK_KIND", "EMAIL_HOST", "EMAIL_PORT", "PYTEST_XDIST_WORKER",
           "TICKETAGENT_XDIST_SET", "LEASE_SECONDS",
           "HELPDESK_UPSTREAM_TIMEOUT", "RECOVER_INTERVAL_SECONDS", "HELPDESK_READ_TIMEOUT",
           "HELPDESK_CONNECT_TIMEOUT", "EMAIL_TIMEOUT",
           "WORKER_THREADS", "TICKETAGENT_VAR_DIR")


def fresh_copy(target: Path) -> Path:
    """The checkout's files (tracked, and new ones not ignored), as a clone would hold them, plus `.venv`."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    venv = Path(os.environ.get("TICKETAGENT_RUNTIME_VENV") or ROOT / ".venv").resolve()
    (target / ".venv").symlink_to(venv, target_is_directory=True)
    (venv / ".installed").touch()  # the venv holds requirements.txt (make run would otherwise run pip again)
    return target


@dataclass
class MakeRun:
    copy: Path
    proc: subprocess.Popen
    log: Path
    banner: str = ""
    url: str = ""
    password: str = ""
    shell_env: dict = field(default_factory=dict)

    @classmethod
    def start(cls, tmp_path: Path, env: dict | None = None, banner_timeout: float = 300) -> MakeRun:
        copy = fresh_copy(tmp_path / "checkout")
        base = {k: v for k, v in os.environ.items() if k not in CLEARED}
        base.update({"NO_COLOR": "1", "TICKETAGENT_REDIS_SERVER": "system", "PORT": str(free_port()),
                     "SANDBOX_PORT": str(free_port()), "SANDBOX_SMTP_PORT": str(free_port())})
        base.update(env or {})
        log = tmp_path / "make-run.log"
        with open(log, "wb") as out:
            # a session of its own: its process group is the terminal's foreground group of this "terminal"
            proc = subprocess.Popen(["make", "run"], cwd=copy, env=base, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        stack = cls(copy, proc, log)
        try:
            wait_for(lambda: "Ctrl-C stops everything" in stack.output() or proc.poll() is not None,
                     timeout=banner_timeout, message="make run's banner")
            assert proc.poll() is None, stack.output()[-4000:]
            stack.read_banner()
        except BaseException:
            stack.stop_now()
            raise
        return stack

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def read_banner(self) -> None:
        text = self.output()
        self.banner = text[text.rindex("ticket agents are "):]  # running, or starting (workers still coming up)
        self.url = re.search(r"dashboard +(http://127\.0\.0\.1:\d+/)", self.banner).group(1)
        self.password = re.search(r"login +admin / (\S+)", self.banner).group(1)
        export = re.search(r"^\| (export .+?) *\|$", self.banner, re.M).group(1)
        self.shell_env = dict(word.split("=", 1) for word in shlex.split(export)[1:])

    def manage(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        """`manage.py ARGS` in "a second shell": a newcomer's environment plus the banner's export line."""
        env = {k: v for k, v in os.environ.items() if k not in CLEARED}
        return subprocess.run([str(self.copy / ".venv" / "bin" / "python"), "manage.py", *args], cwd=self.copy,
                              env={**env, **self.shell_env}, capture_output=True, text=True, timeout=timeout)

    def ctrl_c(self, *, twice: bool = True) -> float:
        """SIGINT to the foreground process group (make, run.py: what a terminal's Ctrl-C reaches), twice within a
        fraction of a second as terminals and process managers often do. The monotonic time of the first."""
        sent = time.monotonic()
        os.killpg(self.proc.pid, signal.SIGINT)
        if twice:
            time.sleep(0.3)
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGINT)
        return sent

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def stop_now(self) -> None:
        """After a failure: stop what is left (run.py stops its children; its own children die with it)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

    def stop_output(self) -> str:
        """What make run printed from its stop on."""
        text = self.output()
        at = text.rfind("stopping everything")
        return text[at:] if at >= 0 else text[-4000:]
