"""The Procfile's process types as command lines: what `make run` starts, by the names deployments use.

    commands = read_procfile(ROOT / "Procfile")     # {"web": "gunicorn ...", ...}
    argv = command_line(commands["worker"], env)    # ["/…/.venv/bin/python", "manage.py", "worker"]

The format is the one honcho and foreman read: ``name: command`` lines,
anything else ignored. ``$VAR``, ``${VAR}`` and ``${VAR:-default}`` are
expanded from the given environment (a shell would do it for honcho); the
command is then split like a shell would, without running one. A bare
``python`` is this interpreter, and another bare program name is looked up
next to it first (the virtualenv's ``bin/``), then on PATH. The ``.env``
file beside the Procfile, which those tools read too, is ``load_env_file``'s.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from pathlib import Path

from dotenv import dotenv_values

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


def load_env_file(path: Path) -> list[str]:
    """The settings of a ``.env`` file into os.environ, never overriding what
    is already set; returns the names it set."""
    loaded = []
    for key, value in dotenv_values(path, interpolate=False).items():
        if value is not None and key not in os.environ:
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
