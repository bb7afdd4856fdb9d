#!/usr/bin/env python3
"""Is requirements.txt the whole runtime set? (`.ci/run` runs both checks; the suite runs the first.)

    check_runtime.py [--requirements FILE]   every library a product module imports is named in FILE
                                             (default requirements.txt); reads the code, imports nothing
    check_runtime.py --import-all            in a venv made from requirements.txt alone: import every
                                             product module, `manage.py check`, gunicorn's config check, and
                                             the migrations on a scratch private PostgreSQL

The product's modules are what `make run`, `make model` and the Procfile run: `ticketagent/`, `ledger/`,
`sandbox/`, `ops/` but for the benchmarks (`ops/bench/`, which `make bench` runs with requirements-dev.txt), and
`scripts/run.py`, `admin_user.py`, `ensure_redis.py`, `model.py`. An import inside `try: … except ImportError`
is optional and not counted. Exit 1 with one line per problem, naming the module and the library.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ticketagent", "ledger", "sandbox", "ops")
NOT_RUNTIME = ("ops/bench/",)
SCRIPTS = ("scripts/run.py", "scripts/admin_user.py", "scripts/ensure_redis.py", "scripts/model.py")
FIRST_PARTY = {*PACKAGES, "scripts", "tests", "ensure_redis", "admin_user", "manage"}


def product_files(root: Path = ROOT) -> list[Path]:
    files = [p for package in PACKAGES for p in sorted((root / package).rglob("*.py"))]
    files = [p for p in files if not any(p.relative_to(root).as_posix().startswith(n) for n in NOT_RUNTIME)]
    return files + [root / s for s in SCRIPTS]


def _optional(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside a `try` whose handlers catch ImportError (or ModuleNotFoundError)."""
    while node in parents:
        child, node = node, parents[node]
        if isinstance(node, ast.Try) and child in node.body:
            names = {ast.unparse(h.type) for h in node.handlers if h.type is not None}
            if any("ImportError" in n or "ModuleNotFoundError" in n for n in names):
                return True
    return False


def third_party_imports(path: Path) -> set[str]:
    """Top-level names of the libraries `path` imports, anywhere in it, unless optional."""
    tree = ast.parse(path.read_text(), str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if _optional(node, parents):
            continue
        found |= {n.split(".")[0] for n in names}
    return {n for n in found if n not in sys.stdlib_module_names and n not in FIRST_PARTY}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def listed(requirements: Path) -> set[str]:
    """The distributions a requirements file names (not those of files it includes)."""
    names = set()
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
        if match and not line.startswith("-"):
            names.add(normalized(match.group(0)))
    return names


def missing(requirements: Path, root: Path = ROOT) -> list[str]:
    """One line per library a product module imports that `requirements` does not name."""
    wanted = listed(requirements)
    providers = importlib.metadata.packages_distributions()
    problems = []
    for path in product_files(root):
        for name in sorted(third_party_imports(path)):
            dists = providers.get(name, [])
            where = path.relative_to(root)
            if not dists:
                problems.append(f"{where} imports {name}, which no installed distribution provides "
                                f"(name it in {requirements.name})")
            elif not any(normalized(d) in wanted for d in dists):
                problems.append(f"{where} imports {name} (from {', '.join(sorted(set(dists)))}), which "
                                f"{requirements.name} does not name")
    return problems


def module_names(root: Path = ROOT) -> list[str]:
    names = []
    for path in product_files(root):
        rel = path.relative_to(root).with_suffix("")
        parts = rel.parts[1:] if rel.parts[0] == "scripts" else rel.parts
        names.append(".".join(p for p in parts if p != "__init__") or rel.parts[0])
    return names


def import_all() -> list[str]:
    """Import every product module under the product's settings; one line per one that fails."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketagent.settings")
    sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
    try:
        import django

        django.setup()
    except Exception as exc:  # noqa: BLE001 - reported with its cause, as an import is
        return [f"django.setup() under {os.environ['DJANGO_SETTINGS_MODULE']}: {type(exc).__name__}: {exc}"]
    problems = []
    for name in module_names():
        if name.endswith(".__main__"):  # a program, run as one (`python -m sandbox`): its imports were read above
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - every failure is reported, with its module
            problems.append(f"import {name}: {type(exc).__name__}: {exc}")
    return problems


def run(argv: list[str], env: dict, what: str) -> list[str]:
    result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if result.returncode == 0:
        print(f"ok: {what}")
        return []
    return [f"{what} failed (exit {result.returncode}):\n{(result.stdout + result.stderr)[-3000:]}"]


def start_to_finish() -> list[str]:
    """`manage.py check`, gunicorn's configuration and app loaded, and the migrations on a scratch database."""
    sys.path.insert(0, str(ROOT))
    from ops import pgserver

    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "ticketagent.settings"}
    env.pop("DATABASE_URL", None)
    problems = run([sys.executable, "manage.py", "check"], env, "manage.py check")
    problems += run([sys.executable, "-m", "gunicorn", "--check-config", "--config", "deploy/gunicorn.conf.py",
                     "ticketagent.wsgi"], env, "gunicorn --check-config")
    with tempfile.TemporaryDirectory(prefix="runtime-check-") as scratch:
        var = Path(scratch)
        var.chmod(0o755)
        try:
            server = pgserver.start(var)
        except pgserver.NoPostgres as exc:
            return problems + [f"the private PostgreSQL did not start: {exc}"]
        try:
            problems += run([sys.executable, "manage.py", "migrate", "--noinput"],
                            {**env, "DATABASE_URL": server.url}, "manage.py migrate (scratch database)")
        finally:
            server.stop()
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requirements", type=Path, default=ROOT / "requirements.txt")
    parser.add_argument("--import-all", action="store_true")
    args = parser.parse_args(argv)
    problems = missing(args.requirements)
    if args.import_all:
        problems += import_all()
        problems = problems or start_to_finish()
    for line in problems:
        print(f"runtime set: {line}", file=sys.stderr)
    if not problems:
        print(f"runtime set: every product module's imports are in {args.requirements.name}"
              + ("; all import, check and migrate" if args.import_all else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
