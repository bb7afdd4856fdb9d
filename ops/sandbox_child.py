"""The sandbox helpdesk as a supervised child: the one place that names how it starts, and its start.

`start_sandbox(procs, db=...)` starts it under an `ops.processes.Processes`
owner and waits until it answers.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ops.processes import Child, Processes
from sandbox.client import SandboxClient


def sandbox_command(*, port: int, smtp_port: int, db: Path, ignore_keys: bool = False,
                    quiet: bool = False) -> list[str]:
    """The command line of the sandbox helpdesk (the one place that names how it starts)."""
    argv = [sys.executable, "-m", "sandbox", "--port", str(port), "--smtp-port", str(smtp_port),
            "--db", str(db)]
    if ignore_keys:
        argv.append("--ignore-keys")
    if quiet:
        argv.append("--quiet")
    return argv


@dataclass
class Sandbox:
    """A running sandbox helpdesk: its process, HTTP URL and SMTP port."""

    child: Child
    url: str
    smtp_port: int


def start_sandbox(procs: Processes, *, db: Path, ports: tuple[int, int] = (0, 0), ignore_keys: bool = False,
                  quiet: bool = False, stream: bool = False, timeout: float = 15.0,
                  argv: list[str] | None = None) -> Sandbox:
    """Start the sandbox helpdesk as a child of `procs` and wait until it
    answers. `ports` (HTTP, SMTP): 0 takes free ones. It prints its ports as
    one JSON line first. `argv` replaces the command line built from the other
    arguments (make run passes the Procfile's). On failure the child is stopped
    and StartError (or TimeoutError) raised."""
    argv = argv or sandbox_command(port=ports[0], smtp_port=ports[1], db=db, ignore_keys=ignore_keys, quiet=quiet)
    child = procs.start("sandbox", argv, stream=stream)
    try:
        line = child.wait_line(lambda text: text.startswith("{") and '"http"' in text, timeout)
        found = json.loads(line)
        url, smtp_port = f"http://127.0.0.1:{int(found['http'])}", int(found["smtp"])
        SandboxClient(url).wait_ready(timeout)
    except BaseException:
        procs.stop([child], grace=5)
        raise
    return Sandbox(child, url, smtp_port)
