"""Sandboxes of their own for the sandbox's tests, started the one way everything starts them."""

import urllib.parse
from types import SimpleNamespace

from ops.processes import Processes
from ops.sandbox_child import start_sandbox
from sandbox.client import SandboxClient


def launch(workdir, *, db=None, **kw) -> SimpleNamespace:
    """A sandbox in `workdir` (options as for start_sandbox); `stop(sb)` ends it and returns its exit status."""
    procs = Processes(log_dir=workdir)
    running = start_sandbox(procs, db=db or workdir / "sandbox.sqlite3", **kw)
    return SimpleNamespace(procs=procs, proc=running.child, url=running.url, smtp_port=running.smtp_port,
                           port=urllib.parse.urlsplit(running.url).port, client=SandboxClient(running.url))


def stop(sb) -> int:
    left = sb.procs.stop(grace=5)
    assert not left, left
    return sb.proc.returncode
