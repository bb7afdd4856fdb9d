"""A private Request Tracker 5 server for the tests and the kill test: Debian's packages, our config.

    server = start_rt_server()          # RTServerError if it cannot start
    tid = server.create_ticket("Printer on fire", requestor="ann@example.com")
    answer = server.post(f"/ticket/{tid}/correspond", {...})
    server.mails()                      # what RT mailed, from the mail file
    stop_rt_process(server)             # RT is down; its database and port are kept
    start_rt_process(server)            # the same RT back on the same port
    set_full_text(server, False)        # restarted without full-text search
    stop_rt_server(server)              # nothing left running, temp dir removed

The helpdesk tests (fixture ``rt_server`` in tests/helpdesks/conftest.py) and
``python -m ops killtest --channel rt`` (ops/killtest/) start it.

How it is put together (every step is a fact checked against RT 5.0.3 on Debian 12):

- Config: RT reads ``$RT_SITE_CONFIG`` instead of /etc/request-tracker5/RT_SiteConfig.pm
  and ``$RT_SITE_CONFIG_DIR`` instead of both RT_SiteConfig.d directories (the
  package's /etc/request-tracker5/RT_SiteConfig.d/51-dbconfig-common.pm would point
  at the database /rtdb). Both point into our temporary directory: /etc is never
  read or written.
- The directory lives on /dev/shm when there is one (SQLite's fsyncs make the
  database setup three times slower on disk) and belongs to the user RT runs as:
  ``www-data`` when we are root (as the package runs RT; a web server has no
  business running as root), else ourselves (checked as ``nobody``).
- ``$BcryptCost`` 4 is in the config before the database is set up: the cost is
  stored in each password hash, and at RT's default 12 every authenticated
  request spends a quarter of a second checking it (measured: 270 ms against 31 ms
  for ``GET /ticket/N``).
- ``$MailCommand`` is a Perl sub appending each outgoing message to ``mail.mbox``
  (mbox format, under flock): RT mails the requestor on create, reply and resolve.
- ``%FullTextSearch`` is enabled (unindexed): without it a ``Content LIKE`` search
  silently matches nothing.
- One ``rt-setup-database-5 --action schema,coredata,insert --datadir`` run builds
  the database: the data dir holds RT's own schema.SQLite and a ``content`` file
  that loads RT's stock initialdata and adds our queues, users, rights and the
  transaction custom field ``IdempotencyKey`` (REST2 cannot create custom fields).
  It is ``--action init`` followed by ``--action insert --datafile``, in one process.
- Both run through ``setpriv``: as ``www-data`` when we are root, and with SIGTERM
  as the parent-death signal, so even a test run killed with SIGKILL leaves no
  server behind.
- ``rt-server --server Starlet`` in a session of its own; SIGTERM to it stops its
  workers (graceful, under a second), and stopping fails loudly unless its whole
  process group is gone afterwards.

Standard library only (no Django, no pytest).
"""

from __future__ import annotations

import base64
import json
import mailbox
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path

from ops.processes import Survived, free_port, stop_popen

__all__ = ["RTAnswer", "RTServer", "RTServerError", "freeze_rt_process", "insert_datafile", "rt_missing",
           "set_full_text", "start_rt_process", "start_rt_server", "stop_rt_process", "stop_rt_server"]

RT_SERVER = Path("/usr/share/request-tracker5/libexec/rt-server")
RT_SETUP = Path("/usr/sbin/rt-setup-database-5")
RT_ETC = Path("/usr/share/request-tracker5/etc")
RT_USER = "www-data"

QUEUE = "Support"
OTHER_QUEUE = "Escalations"
CF_NAME = "IdempotencyKey"

AGENT_RIGHTS = (
    "SeeQueue ShowTicket ShowTicketComments CreateTicket ReplyToTicket CommentOnTicket ModifyTicket "
    "OwnTicket TakeTicket StealTicket SeeCustomField ModifyCustomField SetInitialCustomField"
)
# name -> (password, rights, the queues they hold them in)
USERS = {
    # the account the product acts as
    "agent": ("agent-pass-123", AGENT_RIGHTS, ("General", QUEUE, OTHER_QUEUE)),
    # a possible owner (OwnTicket only)
    "tier2": ("tier2-pass-123", "SeeQueue ShowTicket OwnTicket", ("General", QUEUE, OTHER_QUEUE)),
    # may look, may not act
    "viewer": ("viewer-pass-123", "SeeQueue ShowTicket", (QUEUE,)),
    # may reply and comment but may not see or set custom fields
    "replier": ("replier-pass-123", "SeeQueue ShowTicket ShowTicketComments CreateTicket ReplyToTicket "
                "CommentOnTicket", (QUEUE,)),
    # the rights docs/channels.md once listed, without CreateTicket in the escalation queue
    "listed": ("listed-pass-123", "SeeQueue ShowTicket ShowTicketComments ReplyToTicket CommentOnTicket "
               "ModifyTicket SeeCustomField ModifyCustomField", (QUEUE, OTHER_QUEUE)),
    # as replier, and may see custom fields but not set them
    "cfreader": ("cfreader-pass-123", "SeeQueue ShowTicket ShowTicketComments CreateTicket ReplyToTicket "
                 "CommentOnTicket SeeCustomField", (QUEUE,)),
}

# Never route test traffic through a proxy from the environment.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class RTServerError(RuntimeError):
    """RT is installed but could not be set up or started; the message has the log."""


def rt_missing() -> str | None:
    """Why a real RT cannot run here, or None when it can."""
    for path in (RT_SERVER, RT_SETUP, RT_ETC / "schema.SQLite", RT_ETC / "initialdata"):
        if not path.exists():
            return (f"Request Tracker 5 is not installed ({path} is missing; "
                    "apt-get install request-tracker5 rt5-db-sqlite rt5-standalone, as .ci/run does)")
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is missing"
    return None


@dataclass
class RTAnswer:
    status: int
    headers: dict
    body: object  # decoded JSON, or the text when it is not JSON

    @property
    def location(self) -> str | None:
        """The Location header: relative, e.g. ``/REST/2.0/ticket/7``."""
        return self.headers.get("Location")


@dataclass
class RTServer:
    """A running RT: where it answers, who may call it, where its mail goes."""

    base_url: str  # http://127.0.0.1:PORT (WebPath is empty)
    rest_url: str  # base_url + /REST/2.0
    user: str
    password: str
    queue: str
    queues: tuple
    mail_path: Path
    root: Path
    users: dict = field(default_factory=dict)  # every test account: name -> password
    admin_user: str = "root"
    admin_password: str = "password"  # RT's stock root account
    start_seconds: float = 0.0
    workers: int = 4
    process: subprocess.Popen | None = field(default=None, repr=False)

    # -- HTTP ---------------------------------------------------------------
    def request(self, method: str, path: str, body=None, *, user: str | None = None,
                password: str | None = None, timeout: float = 30) -> RTAnswer:
        """One REST2 call (``path`` relative to /REST/2.0, or a full URL); never
        raises on 4xx/5xx. ``user=""`` sends no credentials."""
        user = self.user if user is None else user
        password = self.users.get(user, self.password) if password is None else password
        headers = {"Accept": "application/json"}
        if user:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json; charset=utf-8"
        url = path if path.startswith("http") else self.rest_url + path
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with _opener.open(req, timeout=timeout) as resp:
                status, hdrs, raw = resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as exc:
            status, hdrs, raw = exc.code, dict(exc.headers), exc.read()
        text = raw.decode("utf-8", "replace")
        try:
            decoded = json.loads(text)
        except ValueError:
            decoded = text
        return RTAnswer(status, hdrs, decoded)

    def get(self, path: str, **kw) -> RTAnswer:
        return self.request("GET", path, **kw)

    def post(self, path: str, body=None, **kw) -> RTAnswer:
        return self.request("POST", path, body, **kw)

    def put(self, path: str, body=None, **kw) -> RTAnswer:
        return self.request("PUT", path, body, **kw)

    # -- helpers ------------------------------------------------------------
    def create_ticket(self, subject: str = "Test ticket", *, requestor: str = "customer@example.com",
                      content: str = "Hello, something is broken.", content_type: str = "text/plain",
                      queue: str | None = None, **fields) -> int:
        """Create a ticket as the agent; returns its id."""
        body = {"Queue": queue or self.queue, "Subject": subject, "Requestor": requestor,
                "Content": content, "ContentType": content_type, **fields}
        answer = self.post("/ticket", body)
        if answer.status != 201:
            raise RTServerError(f"creating a ticket answered {answer.status}: {answer.body!r}")
        return int(answer.body["id"])

    def mails(self) -> list[Message]:
        """Every message RT has sent so far, oldest first."""
        if not self.mail_path.exists():
            return []
        box = mailbox.mbox(str(self.mail_path), create=False)
        try:
            return list(box)
        finally:
            box.close()

    def log(self) -> str:
        return _tail(self.root / "rt-server.log")


# --------------------------------------------------------------------------- files


def _perl(value) -> str:
    """A Perl literal: single-quoted string or plain integer."""
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _site_config(root: Path, port: int, *, full_text: bool = True) -> str:
    mbox = _perl(str(root / "mail.mbox"))
    return f"""# Written by ops/rt_server.py for one run.
Set($rtname, 'rt.test');
Set($Organization, 'rt.test');
Set($CorrespondAddress, 'support@rt.test');
Set($CommentAddress, 'support-comment@rt.test');
Set($OwnerEmail, 'root@rt.test');
Set($Timezone, 'UTC');
Set($DatabaseType, 'SQLite');
Set($DatabaseName, {_perl(str(root / 'rt.sqlite3'))});
Set($WebDomain, '127.0.0.1');
Set($WebPort, {port});
Set($WebPath, '');
Set($BcryptCost, 4);
Set(%FullTextSearch, Enable => {int(full_text)}, Indexed => 0);
Set($LogToSyslog, undef);
Set($LogToFile, undef);
Set($LogToSTDERR, 'warning');
Set($MasonDataDir, {_perl(str(root / 'mason'))});
Set($MasonSessionDir, {_perl(str(root / 'sessions'))});
Set($MailCommand, sub {{
    my $entity = shift;
    open(my $fh, '>>', {mbox}) or return 0;
    flock($fh, 2);
    my $content = $entity->stringify;
    $content =~ s/^(>*From )/>$1/mg;
    print $fh "From rt\\@rt.test  " . scalar(gmtime()) . "\\n" . $content . "\\n";
    close $fh;
    return 1;
}});
1;
"""


def _content() -> str:
    """RT's stock initialdata plus our queues, users, custom field and rights."""
    users, acl = [], []
    for name, (password, rights, queues) in USERS.items():
        users.append(f"  {{ Name => {_perl(name)}, Password => {_perl(password)}, "
                     f"EmailAddress => '{name}@rt.test', RealName => {_perl(name)}, Privileged => 1 }},")
        for queue in queues:
            acl.append(f"  {{ UserId => {_perl(name)}, Queue => {_perl(queue)}, Right => [qw({rights})] }},")
    return f"""# Written by ops/rt_server.py: RT's initialdata, then ours.
require {_perl(str(RT_ETC / 'initialdata'))};
push @Queues, (
  {{ Name => {_perl(QUEUE)}, Description => 'Support requests',
     CorrespondAddress => 'support@rt.test', CommentAddress => 'support-comment@rt.test' }},
  {{ Name => {_perl(OTHER_QUEUE)}, Description => 'Second tier' }},
);
push @Users, (
{chr(10).join(users)}
);
push @CustomFields, (
  {{ Name => {_perl(CF_NAME)}, Type => 'FreeformSingle', Description => 'Idempotency key of the write',
     LookupType => 'RT::Queue-RT::Ticket-RT::Transaction',
     ApplyTo => ['General', {_perl(QUEUE)}, {_perl(OTHER_QUEUE)}] }},
);
push @ACL, (
{chr(10).join(acl)}
);
1;
"""


def _make_root() -> Path:
    shm = Path("/dev/shm")
    parent = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    root = Path(tempfile.mkdtemp(prefix="ticketagent-rt-", dir=parent))
    root.chmod(0o755)
    for sub in ("mason", "sessions", "site-config.d", "setup"):
        (root / sub).mkdir()
    return root


def _write_files(root: Path, port: int, as_user: pwd.struct_passwd | None) -> None:
    (root / "RT_SiteConfig.pm").write_text(_site_config(root, port))
    (root / "setup" / "content").write_text(_content())
    (root / "setup" / "schema.SQLite").symlink_to(RT_ETC / "schema.SQLite")
    if as_user is not None:
        for path in [root, *root.rglob("*")]:
            os.chown(path, as_user.pw_uid, as_user.pw_gid, follow_symlinks=False)


# --------------------------------------------------------------------------- processes


def _tail(path: Path, size: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-size:]
    except OSError:
        return ""


def _command(as_user: pwd.struct_passwd | None, *args: str) -> list[str]:
    """Run ``args`` through setpriv: as ``www-data`` when we are root, and with
    SIGTERM as the parent-death signal, so a killed test run leaves no server."""
    drop = ["--reuid", as_user.pw_name, "--regid", as_user.pw_name, "--init-groups"] if as_user else []
    return ["setpriv", "--pdeathsig", "TERM", *drop, "--", *args]


def _env(root: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RT_", "PERL"))}
    env.update(RT_SITE_CONFIG=str(root / "RT_SiteConfig.pm"), RT_SITE_CONFIG_DIR=str(root / "site-config.d"),
               HOME=str(root), LANG="C.UTF-8")
    return env


def _setup_database(root: Path, as_user) -> None:
    cmd = _command(as_user, str(RT_SETUP), "--action", "schema,coredata,insert", "--skip-create",
                   "--datadir", str(root / "setup"))
    with open(root / "setup.log", "w") as log:
        done = subprocess.run(cmd, cwd=root, env=_env(root), stdin=subprocess.DEVNULL, stdout=log,
                              stderr=subprocess.STDOUT, timeout=300)
    text = _tail(root / "setup.log")
    if done.returncode != 0 or "Done inserting data." not in text or "[error]" in text:
        raise RTServerError(f"rt-setup-database-5 failed (exit {done.returncode}):\n{text}")


def insert_datafile(server: RTServer, datafile: Path) -> str:
    """``rt-setup-database-5 --action insert --datafile``, as an administrator runs it; returns its output."""
    as_user, target = _run_as(), server.root / "setup" / datafile.name
    shutil.copyfile(datafile, target)
    if as_user is not None:
        os.chown(target, as_user.pw_uid, as_user.pw_gid)
    cmd = _command(as_user, str(RT_SETUP), "--action", "insert", "--datafile", str(target))
    done = subprocess.run(cmd, cwd=server.root, env=_env(server.root), capture_output=True, text=True, timeout=300)
    text = done.stdout + done.stderr
    if done.returncode != 0 or "Done inserting data." not in text or "[error]" in text:
        raise RTServerError(f"rt-setup-database-5 --action insert failed (exit {done.returncode}):\n{text[-4000:]}")
    return text


def _wait_ready(server: RTServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RTServerError(f"rt-server exited with {server.process.returncode}:\n{server.log()}")
        try:
            if server.get(f"/queue/{server.queue}", timeout=5).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RTServerError(f"rt-server did not answer within {timeout} s:\n{server.log()}")


def _launch(server: RTServer, as_user, workers: int) -> None:
    """Start rt-server on the server's port and database (already set up)."""
    port = server.base_url.rsplit(":", 1)[1]
    with open(server.root / "rt-server.log", "a") as log:
        server.process = subprocess.Popen(
            _command(as_user, str(RT_SERVER), "--server", "Starlet", "--host", "127.0.0.1",
                     "--port", port, "--max-workers", str(workers)),
            cwd=server.root, env=_env(server.root), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)


def _run_as():
    """The user RT runs as: www-data when we are root, else ourselves (None)."""
    return pwd.getpwnam(RT_USER) if os.geteuid() == 0 else None


def start_rt_server(*, port: int | None = None, workers: int = 4, timeout: float = 120) -> RTServer:
    """Set up a fresh database and start RT on 127.0.0.1; waits until REST2 answers."""
    missing = rt_missing()
    if missing:
        raise RTServerError(missing)
    started = time.monotonic()
    as_user = _run_as()
    port = port or free_port()
    root = _make_root()
    server = None
    try:
        _write_files(root, port, as_user)
        _setup_database(root, as_user)
        base = f"http://127.0.0.1:{port}"
        name, (password, _, _) = "agent", USERS["agent"]
        server = RTServer(base_url=base, rest_url=f"{base}/REST/2.0", user=name, password=password,
                          queue=QUEUE, queues=(QUEUE, OTHER_QUEUE, "General"), mail_path=root / "mail.mbox",
                          root=root, users={n: u[0] for n, u in USERS.items()}, workers=workers)
        _launch(server, as_user, workers)
        _wait_ready(server, timeout)
    except BaseException:
        if server is not None and server.process is not None:
            _stop_group(server.process)
        shutil.rmtree(root, ignore_errors=True)
        raise
    server.start_seconds = time.monotonic() - started
    return server


def freeze_rt_process(server: RTServer) -> None:
    """RT stops answering but closes nothing (SIGSTOP to its process group): connections are
    still accepted, requests hang. `stop_rt_process(server, grace=0)` ends it."""
    os.killpg(server.process.pid, signal.SIGSTOP)


def stop_rt_process(server: RTServer, *, grace: float = 10) -> None:
    """Take RT down (every process of its group; SIGKILL after `grace` seconds),
    keeping its database, mail file and port: `start_rt_process()` brings the same RT back."""
    if server.process is not None:
        _stop_group(server.process, grace=grace)


def start_rt_process(server: RTServer, *, timeout: float = 120) -> None:
    """Start a stopped RT again on the same port and database; waits until REST2 answers."""
    if server.process is not None and server.process.poll() is None:
        raise RTServerError("rt-server is still running")
    _launch(server, _run_as(), server.workers)
    try:
        _wait_ready(server, timeout)
    except BaseException:
        _stop_group(server.process)
        raise


def _stop_group(proc: subprocess.Popen, grace: float = 10) -> None:
    """SIGTERM to the server (it stops its workers), then its whole process group gone (`ops.processes`)."""
    try:
        stop_popen(proc, grace=grace, group=True)
    except Survived as exc:
        raise RTServerError(f"rt-server: {exc}") from None


def set_full_text(server: RTServer, enabled: bool, *, timeout: float = 120) -> None:
    """Restart RT with full-text search on or off (what the channel does without it is tested)."""
    port = int(server.base_url.rsplit(":", 1)[1])
    stop_rt_process(server)
    (server.root / "RT_SiteConfig.pm").write_text(_site_config(server.root, port, full_text=enabled))
    start_rt_process(server, timeout=timeout)


def stop_rt_server(server: RTServer, *, keep_files: bool = False) -> None:
    """Stop the server and every worker it forked (RTServerError if any
    process of its group is left); remove its directory."""
    if server.process is not None:
        _stop_group(server.process)
    if not keep_files:
        shutil.rmtree(server.root, ignore_errors=True)
