"""The deploy guide's walkthrough across hosts, built on network namespaces of one machine (docs/deploy.md).

Hosts are network namespaces on one bridge, each with its own address and
host name; every process is started inside its host with the guide's settings:

    db      PostgreSQL (its own cluster: initdb, listen_addresses, pg_hba) and
            redis-server (bind, protected-mode, a password)
    hd      the sandbox helpdesk (the stand-in for the real one)
    web     gunicorn (PLAIN_HTTP=true: plain http with nothing in front)
    w1, w2  one worker each
    sweep   the recovery sweep

The machine itself sits on the bridge too (its first address), so a test or
an operator reaches every host. `cut(host)` takes a host's link down on the
bridge side: its packets are dropped silently, no RST, as when a cable is
pulled or a VM is partitioned; `restore(host)` brings it back.

Needs root, iproute2 (`ip netns`), util-linux (`unshare`, `setpriv`), the
system's PostgreSQL binaries and redis-server. `missing()` says what is absent.

    python -m ops.twohosts          # build it, print the addresses, tear down on Ctrl-C
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ops.processes import ROOT, Child, Processes, say, wait_port
from ops.procfile import command_line, read_procfile
from ops.sandbox_child import sandbox_command

PREFIX = "tad"  # namespaces tad-<host>, bridge tadbr0, veths tad<n>h (host side)
HOSTS = ("db", "hd", "web", "w1", "w2", "sweep")
PG_PORT, REDIS_PORT, WEB_PORT, HD_PORT, HD_SMTP_PORT = 5432, 6379, 8000, 8025, 8026


def _run(*argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()[-500:]}")
    return result


def pg_bin(name: str) -> str | None:
    """A PostgreSQL program of the system's newest installed version."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return found[-1] if found else shutil.which(name)


def missing() -> str:
    """Why the walkthrough cannot be built here ("" when it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for program in ("ip", "unshare", "setpriv", "redis-server"):
        if shutil.which(program) is None:
            return f"{program} is not installed"
    if pg_bin("initdb") is None or pg_bin("postgres") is None:
        return "PostgreSQL's server binaries (initdb, postgres) are not installed"
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        return "there is no postgres user to run PostgreSQL as"
    probe = f"{PREFIX}-probe"
    result = _run("ip", "netns", "add", probe, check=False)
    if result.returncode != 0:
        return f"cannot create a network namespace: {result.stderr.strip()}"
    _run("ip", "netns", "del", probe, check=False)
    return ""


@dataclass
class TwoHosts:
    """The walkthrough: build() the hosts, start() the processes, cut()/restore() a host, down() everything."""

    workdir: Path
    subnet: str = "10.231.25"
    lease_seconds: float = 6.0
    extra_env: dict = field(default_factory=dict)
    procs: Processes = field(init=False)
    children: dict[str, Child] = field(default_factory=dict, init=False)
    db_password: str = field(default_factory=lambda: secrets.token_urlsafe(18), init=False)
    redis_password: str = field(default_factory=lambda: secrets.token_urlsafe(18), init=False)
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(50), init=False)
    pgdata: Path | None = field(default=None, init=False)

    def __post_init__(self):
        self.workdir = Path(self.workdir)
        self.procs = Processes(env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, log_dir=self.workdir / "logs")

    # -- addresses -------------------------------------------------------------
    def addr(self, host: str) -> str:
        return f"{self.subnet}.{HOSTS.index(host) + 2}"

    @property
    def gateway(self) -> str:
        return f"{self.subnet}.1"

    def ns(self, host: str) -> str:
        return f"{PREFIX}-{host}"

    def veth(self, host: str) -> str:
        return f"{PREFIX}{HOSTS.index(host)}h"

    @property
    def web_url(self) -> str:
        return f"http://{self.addr('web')}:{WEB_PORT}"

    @property
    def helpdesk_url(self) -> str:
        return f"http://{self.addr('hd')}:{HD_PORT}"

    @property
    def database_url(self) -> str:
        return f"postgres://ticketagent:{self.db_password}@{self.addr('db')}:{PG_PORT}/ticketagent"

    @property
    def redis_url(self) -> str:
        return f"redis://:{self.redis_password}@{self.addr('db')}:{REDIS_PORT}/0"

    # -- the network -------------------------------------------------------------
    def build(self) -> None:
        """The bridge and one namespace per host, each with its address, its loopback and a route to the bridge."""
        self.down_network()
        bridge = f"{PREFIX}br0"
        _run("ip", "link", "add", bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.gateway}/24", "dev", bridge)
        _run("ip", "link", "set", bridge, "up")
        for host in HOSTS:
            ns, outside = self.ns(host), self.veth(host)
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run("ip", "link", "set", outside, "master", bridge, "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.addr(host)}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")

    def down_network(self) -> None:
        """Remove the namespaces and the bridge (also what an earlier run left behind)."""
        for host in HOSTS:
            _run("ip", "netns", "del", self.ns(host), check=False)
            _run("ip", "link", "del", self.veth(host), check=False)
        _run("ip", "link", "del", f"{PREFIX}br0", check=False)

    def cut(self, host: str) -> None:
        """The host's link goes down on the bridge side: everything it sends or is sent is dropped, silently."""
        _run("ip", "link", "set", self.veth(host), "down")

    def restore(self, host: str) -> None:
        _run("ip", "link", "set", self.veth(host), "up")

    # -- processes ------------------------------------------------------------------
    def in_host(self, host: str, argv: list[str], *, user: str | None = None) -> list[str]:
        """`argv` run inside `host`'s namespace, under its own host name (and as `user`)."""
        prefix = ["ip", "netns", "exec", self.ns(host), "unshare", "--uts", "--", "sh", "-c",
                  'hostname "$0" && exec "$@"', host]
        if user is not None:
            prefix += ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--"]
        return prefix + argv

    def app_env(self) -> dict[str, str]:
        """The settings every application host gets (docs/deploy.md, "Across hosts"), as one env file would."""
        return {
            **{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "VIRTUAL_ENV")},
            "DJANGO_SETTINGS_MODULE": "ticketagent.settings",
            "DEBUG": "false",
            "PLAIN_HTTP": "true",
            "SECRET_KEY": self.secret_key,
            "ALLOWED_HOSTS": self.addr("web"),
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "RQ_QUEUE": "ticketagent",
            "HELPDESK_KIND": "rest",
            "HELPDESK_URL": self.helpdesk_url,
            "EMAIL_HOST": self.addr("hd"),
            "EMAIL_PORT": str(HD_SMTP_PORT),
            "OPENAI_API_KEY": "",
            "LEASE_SECONDS": str(self.lease_seconds),
            "RECOVER_INTERVAL_SECONDS": "1",
            "WEB_BIND": f"{self.addr('web')}:{WEB_PORT}",
            "WEB_CONCURRENCY": "2",
            "WEB_ACCESS_LOG": "",
            "TICKETAGENT_VAR_DIR": str(self.workdir / "var"),
            "PYTHONUNBUFFERED": "1",
            **self.extra_env,
        }

    def start_database(self) -> None:
        """A PostgreSQL cluster of its own and redis-server on the db host, set up as docs/deploy.md says."""
        self.pgdata = Path(tempfile.mkdtemp(prefix=f"{PREFIX}-pg-"))  # the postgres user cannot enter pytest's dirs
        shutil.chown(self.pgdata, "postgres", "postgres")
        data, sock = self.pgdata / "data", self.pgdata
        _run("setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", pg_bin("initdb"), "-D",
             str(data), "-U", "postgres", "--auth-local=peer", "--auth-host=scram-sha-256", "-E", "UTF8",
             timeout=120)
        with open(data / "pg_hba.conf", "a") as hba:
            hba.write(f"host ticketagent ticketagent {self.subnet}.0/24 scram-sha-256\n")
        self.children["postgres"] = self.procs.start("postgres", self.in_host("db", [
            pg_bin("postgres"), "-D", str(data), "-c", f"listen_addresses={self.addr('db')}", "-p", str(PG_PORT),
            "-c", f"unix_socket_directories={sock}", "-c", "max_connections=50", "-c", "fsync=off"], user="postgres"))
        if not wait_port(PG_PORT, 60, host=self.addr("db"), check=self._alive("postgres")):
            raise RuntimeError(f"PostgreSQL did not listen\n{self.children['postgres'].tail()}")
        psql = [pg_bin("psql"), "-h", str(sock), "-p", str(PG_PORT), "-U", "postgres", "-v", "ON_ERROR_STOP=1"]
        for sql in (f"CREATE ROLE ticketagent LOGIN PASSWORD '{self.db_password}'",
                    "CREATE DATABASE ticketagent OWNER ticketagent"):
            _run("setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", *psql, "-c", sql)
        self.children["redis"] = self.procs.start("redis", self.in_host("db", [
            "redis-server", "--bind", self.addr("db"), "--port", str(REDIS_PORT), "--protected-mode", "yes",
            "--requirepass", self.redis_password, "--save", "", "--appendonly", "no"]))
        if not wait_port(REDIS_PORT, 30, host=self.addr("db"), check=self._alive("redis")):
            raise RuntimeError(f"redis-server did not listen\n{self.children['redis'].tail()}")

    def _alive(self, name: str):
        def check():
            child = self.children[name]
            if child.poll() is not None:
                raise RuntimeError(f"{name} exited ({child.returncode}):\n{child.tail()}")
        return check

    def manage(self, host: str, *args: str, env: dict | None = None, timeout: float = 180) -> str:
        """`manage.py <args>` run once on `host`; its output, or RuntimeError with it."""
        result = subprocess.run(self.in_host(host, [sys.executable, "manage.py", *args]), cwd=ROOT,
                                env={**self.app_env(), **(env or {})}, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} on {host} failed:\n{result.stdout[-2000:]}"
                               f"{result.stderr[-3000:]}")
        return result.stdout

    def start_app(self, operator: tuple[str, str], *, ignore_keys: bool = True) -> None:
        """The helpdesk on hd, then migrate, collectstatic and a first operator from the web host, then the
        Procfile's web, worker (w1, w2) and sweep processes, each on its host."""
        sandbox = sandbox_command(port=HD_PORT, smtp_port=HD_SMTP_PORT, db=self.workdir / "sandbox.sqlite3",
                                  ignore_keys=ignore_keys, quiet=True) + ["--host", self.addr("hd")]
        self.children["sandbox"] = self.procs.start("sandbox", self.in_host("hd", sandbox))
        if not wait_port(HD_PORT, 30, host=self.addr("hd"), check=self._alive("sandbox")):
            raise RuntimeError(f"the sandbox helpdesk did not listen\n{self.children['sandbox'].tail()}")
        self.manage("web", "migrate", "--noinput", "--verbosity", "0")
        self.manage("web", "collectstatic", "--noinput", "--verbosity", "0")
        self.manage("web", "createsuperuser", "--noinput", env={
            "DJANGO_SUPERUSER_USERNAME": operator[0], "DJANGO_SUPERUSER_PASSWORD": operator[1],
            "DJANGO_SUPERUSER_EMAIL": "ops@example.com"})
        procfile = read_procfile(ROOT / "Procfile")
        env = self.app_env()
        procfile["sweep"] = "python manage.py recover --loop"  # a host that only sweeps, beside the sweeping workers
        for name, host in (("web", "web"), ("worker", "w1"), ("worker", "w2"), ("sweep", "sweep")):
            argv = command_line(procfile[name], env)
            self.children[host] = self.procs.start(host, self.in_host(host, argv), env=env)
        if not wait_port(WEB_PORT, 60, host=self.addr("web"), check=self._alive("web")):
            raise RuntimeError(f"the web did not listen\n{self.children['web'].tail()}")

    def logs(self, chars: int = 1500, names: tuple[str, ...] = ("w1", "w2", "sweep", "web")) -> str:
        """The last lines of the application processes' logs, and where the whole logs are."""
        tails = [f"--- {name}\n{self.children[name].tail(chars)}" for name in names if name in self.children]
        return "\n".join([*tails, f"(all logs: {self.procs.log_dir})"])

    def down(self) -> None:
        """Stop every process (links restored first, so a warm shutdown can finish), remove the network."""
        for host in HOSTS:
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self.restore(host)
        self.procs.stop(grace=5)
        self.children.clear()
        self.down_network()
        if self.pgdata is not None:
            shutil.rmtree(self.pgdata, ignore_errors=True)
            self.pgdata = None


def main() -> int:
    reason = missing()
    if reason:
        say(f"cannot build the walkthrough: {reason}")
        return 2
    hosts = TwoHosts(Path(tempfile.mkdtemp(prefix=f"{PREFIX}-")))
    operator = ("ops", secrets.token_urlsafe(12))
    try:
        hosts.build()
        hosts.start_database()
        hosts.start_app(operator)
        say(f"web {hosts.web_url} (user {operator[0]}, password {operator[1]}); helpdesk {hosts.helpdesk_url}")
        say(f"database {hosts.addr('db')}:{PG_PORT}, redis {hosts.addr('db')}:{REDIS_PORT}; logs in {hosts.workdir}")
        say("hosts: " + ", ".join(f"{h} {hosts.addr(h)} (ip netns exec {hosts.ns(h)} ...)" for h in HOSTS))
        say("Ctrl-C tears it down")
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        hosts.down()


if __name__ == "__main__":
    sys.exit(main())
