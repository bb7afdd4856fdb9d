"""The Procfile's process types as command lines: what `make run` starts, by the names deployments use.

    commands = read_procfile(ROOT / "Procfile")     # {"web": "gunicorn ...", ...}
    argv = command_line(commands["worker"], env)    # ["/…/.venv/bin/python", "manage.py", "worker"]

The format is the one honcho and foreman read: ``name: command`` lines,
anything else ignored. ``$VAR``, ``${VAR}`` and ``${VAR:-default}`` are
expanded from the given environment (a shell would do it for honcho); the
command is then split like a shell would, without running one. A bare
``python`` is this interpreter, and another bare program name is looked up
next to it first (the virtualenv's ``bin/``), then on PATH.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from pathlib import Path

_LINE = re.compile(r"^([A-Za-z0-9_-]+):\s*(.+)$")
_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::-([^}]*))?\}|(\w+))")


def read_procfile(path: Path) -> dict[str, str]:
    """Process type -> command, in the file's order."""
    commands = {}
    for line in path.read_text().splitlines():
        match = _LINE.match(line.strip())
        if match:
            commands[match.group(1)] = match.group(2).strip()
    return commands


def expand(text: str, env: dict[str, str]) -> str:
    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(3)
        found = env.get(name, "")
        return found if found else (match.group(2) or "")

    return _VARIABLE.sub(value, text)


def command_line(command: str, env: dict[str, str]) -> list[str]:
    argv = shlex.split(expand(command, env))
    if not argv:
        raise ValueError(f"empty command: {command!r}")
    program = argv[0]
    if program == "python":
        argv[0] = sys.executable
    elif os.sep not in program:
        beside = Path(sys.executable).parent / program
        argv[0] = str(beside) if beside.exists() else (shutil.which(program, path=env.get("PATH")) or program)
    return argv
