#!/usr/bin/env python3
"""The environment variables the product's code reads, found in its source, checked against docs/configuration.md.

    env_inventory.py            list them: name, where each is read
    env_inventory.py --check    exit 1 naming each variable read but not in the table, or in the table but not read,
                                and when the code reads more than MAX_VARIABLES

"The product's code" is what runs in production: ``ticketagent/``, ``ledger/``, ``ops/settings.py`` (the operator
tools' settings), ``manage.py`` and ``deploy/gunicorn.conf.py`` (the Procfile's web). A read is a call of one
of ``ticketagent.env``'s readers (``envstr("NAME", ...)``, ``envint``, ...) or ``os.environ.get("NAME")``,
``os.environ["NAME"]``, ``os.environ.setdefault("NAME", ...)``, ``os.getenv("NAME")``, ``"NAME" in os.environ``.
A read by a name that is not written out (a variable, an f-string) is reported too: the inventory could not see it.
``ticketagent/env.py`` itself is the readers' home and reads only the names it is given.

``make structure`` (scripts/check_structure.py) runs the check; so does tests/deploy/test_configuration_table.py.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ticketagent", "ledger")
FILES = ("ops/settings.py", "manage.py", "deploy/gunicorn.conf.py")
READERS_MODULE = "ticketagent/env.py"
READERS = {"envstr", "envchoice", "envbool", "envint", "envfloat", "envlist", "envint_or_none", "envmap",
           "envprices"}
TABLE = ROOT / "docs" / "configuration.md"
SECTION = "## The variables"
NAME = re.compile(r"`([A-Z][A-Z0-9_]*)`")
# A value with one right answer is a constant, not a variable (docs/configuration.md, "Fixed values").
MAX_VARIABLES = 60


def product_files(root: Path = ROOT) -> list[Path]:
    files = [p for package in PACKAGES for p in sorted((root / package).rglob("*.py"))
             if "migrations" not in p.parts and p.relative_to(root).as_posix() != READERS_MODULE]
    return files + [root / name for name in FILES if (root / name).exists()]


def _is_environ(node: ast.AST) -> bool:
    """`os.environ` (or a bare `environ`)."""
    return ((isinstance(node, ast.Attribute) and node.attr == "environ")
            or (isinstance(node, ast.Name) and node.id == "environ"))


def _named(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _read_name(node: ast.AST) -> tuple[bool, ast.AST | None]:
    """Whether `node` reads the environment, and the expression that names the variable."""
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        first = node.args[0] if node.args else None
        if name in READERS:
            return True, first
        if isinstance(func, ast.Attribute) and _is_environ(func.value) and name in ("get", "setdefault", "pop"):
            return True, first
        if name == "getenv":
            return True, first
    if isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load):
        return True, node.slice
    if (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn))
            and _is_environ(node.comparators[0])):
        return True, node.left
    return False, None


def reads(files: list[Path] | None = None, root: Path = ROOT) -> tuple[dict[str, list[str]], list[str]]:
    """{variable: ["path:line", ...]} over `files` (default: the product's), and the reads by a name not written out."""
    found: dict[str, list[str]] = defaultdict(list)
    unseen: list[str] = []
    for path in product_files(root) if files is None else files:
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            is_read, name_node = _read_name(node)
            if not is_read:
                continue
            name = _named(name_node)
            if name is None:
                unseen.append(f"{rel}:{node.lineno}: reads the environment by a name not written out "
                              f"({ast.unparse(name_node) if name_node is not None else 'no name'})")
            else:
                found[name].append(f"{rel}:{node.lineno}")
    return dict(sorted(found.items())), unseen


def documented(text: str | None = None) -> set[str]:
    """The variables in the table of docs/configuration.md's section "The variables": the names in each row's
    first cell (| `NAME` | default | ... or | `NAME_A` / `NAME_B` | ...)."""
    text = TABLE.read_text() if text is None else text
    names: set[str] = set()
    inside = False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line.strip() == SECTION
        elif inside and line.startswith("|"):
            names.update(NAME.findall(line.split("|")[1]))
    return names


def problems(found: dict[str, list[str]] | None = None, table: set[str] | None = None) -> list[str]:
    """Each disagreement between the code's reads and the table, naming the variable."""
    if found is None:
        found, unseen = reads()
    else:
        unseen = []
    table = documented() if table is None else table
    out = list(unseen)
    out += [f"{name} is read ({', '.join(where)}) but not in docs/configuration.md's table"
            for name, where in found.items() if name not in table]
    out += [f"{name} is in docs/configuration.md's table but no product code reads it"
            for name in sorted(table - set(found))]
    if len(found) > MAX_VARIABLES:
        out.append(f"the product's code reads {len(found)} variables, more than {MAX_VARIABLES}: make the ones with "
                   "one right value constants (docs/configuration.md, \"Fixed values\")")
    return out


def main(argv: list[str]) -> int:
    if "--check" in argv:
        found = problems()
        for line in found:
            print(line)
        return 1 if found else 0
    found, unseen = reads()
    for name, where in found.items():
        print(f"{name:42} {', '.join(where)}")
    for line in unseen:
        print(line)
    print(f"{len(found)} variables read by the product's code (at most {MAX_VARIABLES})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
