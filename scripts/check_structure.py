#!/usr/bin/env python3
"""``make structure``: the layout's promises, checked on every ``make lint``.

Outside ``tests/`` and migrations:

* no module over 500 lines;
* no function (or method) over 60 lines;
* no private name (``_name``) imported from another module, whether by
  ``from m import _name`` or by ``m._name`` on an imported module;
* no import cycle between the project's modules, counting imports inside
  functions too (an import hidden in a function is still a dependency);
  imports under ``if TYPE_CHECKING:`` do not run and are not counted.

An exception, where one is truly better, goes in EXCEPTIONS below with its
reason. Exit status 1 on any breach, listing each with file and line.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ticketagent", "ledger", "sandbox", "ops", "scripts")
SKIP_PARTS = {"migrations", "tests", ".venv", "var", "__pycache__", "node_modules"}
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60

# "path" or "path:function" -> why the rule does not apply there.
EXCEPTIONS: dict[str, str] = {
    "ops/bench/gate.py": "figure 2 times the gate as the pipeline calls it, fenced by the pipeline's own "
                         "ticketagent.services._hold on a _Run: the benchmark measures that code as it is, and "
                         "the product has no public fence to offer in its place",
}


@dataclass(frozen=True)
class Breach:
    path: str
    line: int
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}: {self.detail}"


def project_files() -> list[Path]:
    files = []
    for package in PACKAGES:
        base = ROOT / package
        if not base.exists():
            continue
        for path in sorted(base.rglob("*.py")):
            if SKIP_PARTS.isdisjoint(path.relative_to(ROOT).parts):
                files.append(path)
    manage = ROOT / "manage.py"
    return [*files, manage] if manage.exists() else files


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of nodes under `if TYPE_CHECKING:`."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
            if name == "TYPE_CHECKING":
                for child in node.body:
                    hidden.update(id(n) for n in ast.walk(child))
    return hidden


def _resolve_from(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    drop = node.level - (1 if is_package else 0)
    base = base[: len(base) - drop] if drop else base
    return ".".join([*base, *([node.module] if node.module else [])])


class Module:
    def __init__(self, path: Path, known: set[str]):
        self.path = path
        self.rel = str(path.relative_to(ROOT))
        self.name = module_name(path)
        self.is_package = path.name == "__init__.py"
        self.source = path.read_text()
        self.tree = ast.parse(self.source, filename=self.rel)
        self.known = known
        self.imports: dict[str, int] = {}  # imported project module -> first line
        self.private_imports: list[tuple[int, str]] = []
        self._collect()

    def _target(self, dotted: str) -> str | None:
        """The project module `dotted` names (itself, or the longest known prefix)."""
        parts = dotted.split(".")
        while parts:
            candidate = ".".join(parts)
            if candidate in self.known:
                return candidate
            parts.pop()
        return None

    def _add(self, dotted: str, line: int) -> None:
        target = self._target(dotted)
        if target and target != self.name:
            self.imports.setdefault(target, line)

    def _collect(self) -> None:
        hidden = _type_checking_nodes(self.tree)
        aliases: dict[str, str] = {}  # local name -> project module
        for node in ast.walk(self.tree):
            if id(node) in hidden:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self._add(alias.name, node.lineno)
                    if alias.asname and self._target(alias.name) == alias.name:
                        aliases[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                source = _resolve_from(self.name, self.is_package, node)
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    if full in self.known:
                        self._add(full, node.lineno)
                        aliases[alias.asname or alias.name] = full
                    else:
                        self._add(source, node.lineno)
                        if _private(alias.name) and self._target(source):
                            self.private_imports.append((node.lineno, f"{alias.name} from {source}"))
        for node in ast.walk(self.tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and _private(node.attr)):
                self.private_imports.append((node.lineno, f"{aliases[node.value.id]}.{node.attr}"))

    def functions(self):
        stack = [(self.tree, "")]
        while stack:
            parent, prefix = stack.pop()
            for node in ast.iter_child_nodes(parent):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    qual = f"{prefix}{node.name}"
                    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                    yield qual, first, node.end_lineno - first + 1
                    stack.append((node, qual + "."))
                elif isinstance(node, ast.ClassDef):
                    stack.append((node, f"{prefix}{node.name}."))
                else:
                    stack.append((node, prefix))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _excepted(rel: str, function: str = "") -> bool:
    return rel in EXCEPTIONS or (function and f"{rel}:{function}" in EXCEPTIONS)


def cycles(modules: dict[str, Module]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in modules[node].imports:
            if nxt not in modules:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for name in sorted(modules):
        if name not in index:
            visit(name)
    return found


def check() -> list[Breach]:
    paths = project_files()
    known = {module_name(p) for p in paths}
    modules = {m.name: m for m in (Module(p, known) for p in paths)}
    breaches: list[Breach] = []
    for module in modules.values():
        lines = len(module.source.splitlines())
        if lines > MAX_MODULE_LINES and not _excepted(module.rel):
            breaches.append(Breach(module.rel, 1, "module too long", f"{lines} lines (max {MAX_MODULE_LINES})"))
        for qual, line, length in module.functions():
            if length > MAX_FUNCTION_LINES and not _excepted(module.rel, qual):
                breaches.append(Breach(module.rel, line, "function too long",
                                       f"{qual}() has {length} lines (max {MAX_FUNCTION_LINES})"))
        for line, what in module.private_imports:
            if not _excepted(module.rel):
                breaches.append(Breach(module.rel, line, "private name imported", what))
    for component in cycles(modules):
        first = modules[component[0]]
        chain = " -> ".join(f"{m} (line {modules[m].imports.get(n, '?')})"
                            for m, n in zip(component, [*component[1:], component[0]], strict=True))
        breaches.append(Breach(first.rel, 1, "import cycle", chain))
    return sorted(breaches, key=lambda b: (b.path, b.line))


def main() -> int:
    breaches = check()
    for breach in breaches:
        print(breach)
    n = len(project_files())
    if breaches:
        print(f"structure: {len(breaches)} breach(es) in {n} modules", file=sys.stderr)
        return 1
    print(f"structure: {n} modules checked; sizes, private imports and import cycles are within the rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
