#!/usr/bin/env python3
"""``make structure``: the layout's promises, checked on every ``make lint``.

Outside ``tests/`` and migrations:

* every module says its one purpose in its docstring's first line (an
  empty ``__init__.py`` may stay empty);
* no module over 500 lines;
* no function (or method) over 60 lines;
* no private name (``_name``) imported from another module, whether by
  ``from m import _name`` or by ``m._name`` on an imported module;
* no import cycle between the project's modules, counting imports inside
  functions too (an import hidden in a function is still a dependency);
  imports under ``if TYPE_CHECKING:`` do not run and are not counted.

And the architecture's never-rules (`docs/design.md`, "Layers"):

* the ledger imports nothing of ``ticketagent`` (nor ``ops``, ``sandbox``)
  and names no action of the owner's table and no ticket in its code
  (docstrings and comments apart): its owner registers actions and channels;
* the pipeline and the services import nothing of scheduling
  (``ticketagent.jobs``, ``window``, ``recovery``, ``runner``, ``rqworker``)
  nor rq / django_rq / redis: they tell it by signals;
* the gate's public surface is its three calls (plus ``intent_prepare``,
  which builds the intent); no ledger function takes a
  callable; the names of the folded protocol (``Fence``, ``Rider``,
  ``effect_call``, ``outcome_fence``, ``fold``) are defined nowhere;
* ``ledger.statements`` (the ledger's hand-written SQL) is imported only
  inside the ledger, and the pipeline runs SQL only in
  ``ticketagent.pipeline.statements`` (its phases' locks and checkpoint move);
* no ``connection.vendor`` branch: PostgreSQL is the one database.

And the configuration's one table: every environment variable the product's
code reads is in docs/configuration.md's table, and the table lists nothing
else (``scripts/env_inventory.py``).

An exception, where one is truly better, goes in EXCEPTIONS below with its
reason. Exit status 1 on any breach, listing each with file and line.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import env_inventory  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ticketagent", "ledger", "sandbox", "ops", "scripts")
SKIP_PARTS = {"migrations", "tests", ".venv", "var", "__pycache__", "node_modules"}
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60

# "path" or "path:function" -> why the rule does not apply there.
EXCEPTIONS: dict[str, str] = {
    "ops/processes.py": "the one module of process start and stop (supervised children, servers in a session of "
                        "their own, daemons by pid): split, it would spread again what it exists to keep together",
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


SCHEDULING = ("ticketagent.jobs", "ticketagent.window", "ticketagent.recovery", "ticketagent.runner",
              "ticketagent.rqworker")
QUEUE_LIBRARIES = ("rq", "django_rq", "redis")
GATE_SURFACE = {"intent_prepare", "intent_record", "effect_perform", "outcome_record"}
GONE = {"Fence", "Rider", "effect_call", "outcome_fence", "fold", "intent_commit", "lease_fence"}
PIPELINE_STATEMENTS = "ticketagent.pipeline.statements"  # the pipeline's one module of SQL


def _registered_actions() -> set[str]:
    """The action names of the owner's table (`ticketagent/actions.py`: `ActionSpec("name", …)`)."""
    tree = ast.parse((ROOT / "ticketagent" / "actions.py").read_text())
    return {node.args[0].value for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "ActionSpec" and node.args
            and isinstance(node.args[0], ast.Constant)}


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def _external_imports(module: Module) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def _ledger_names(module: Module, actions: set[str]) -> list[Breach]:
    """What of its owner the ledger's code names: an action, a ticket."""
    breaches, docs = [], _docstrings(module.tree)
    for node in ast.walk(module.tree):
        words = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            words = [node.value]
        elif isinstance(node, ast.Name):
            words = [node.id]
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            words = [node.name]
        for word in words:
            named = sorted(a for a in actions if a in word) + (["ticket"] if "ticket" in word.lower() else [])
            if named:
                breaches.append(Breach(module.rel, node.lineno, "the ledger names its owner", f"{word[:60]!r}"))
                break
    return breaches


def architecture(modules: dict[str, Module]) -> list[Breach]:
    breaches: list[Breach] = []
    actions = _registered_actions()
    for module in modules.values():
        name, rel = module.name, module.rel
        if name.split(".")[0] == "ledger":
            for target, line in module.imports.items():
                if target.split(".")[0] in ("ticketagent", "ops", "sandbox"):
                    breaches.append(Breach(rel, line, "the ledger imports its owner", target))
            breaches += _ledger_names(module, actions)
        if name.startswith(("ticketagent.pipeline", "ticketagent.services")):
            for target, line in module.imports.items():
                if target.startswith(SCHEDULING):
                    breaches.append(Breach(rel, line, "the pipeline or a service imports scheduling", target))
            for line, top in _external_imports(module):
                if top in QUEUE_LIBRARIES:
                    breaches.append(Breach(rel, line, "the pipeline or a service imports the queue", top))
        if "ledger.statements" in module.imports and name.split(".")[0] != "ledger":
            breaches.append(Breach(rel, module.imports["ledger.statements"], "the ledger's SQL used outside it",
                                   "ledger.statements"))
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in GONE:
                breaches.append(Breach(rel, node.lineno, "the folded protocol is back", node.name))
            if (isinstance(node, ast.Attribute) and node.attr == "vendor"
                    and getattr(node.value, "id", "") == "connection"):
                breaches.append(Breach(rel, node.lineno, "a database vendor branch", "connection.vendor"))
            if (name.startswith("ticketagent.pipeline") and name != PIPELINE_STATEMENTS
                    and isinstance(node, ast.Attribute) and node.attr == "cursor"
                    and getattr(node.value, "id", "") == "connection"):
                breaches.append(Breach(rel, node.lineno, "the pipeline runs SQL of its own", "cursor()"))
            if (name.split(".")[0] == "ledger" and isinstance(node, ast.arg) and node.annotation is not None
                    and "Callable" in ast.unparse(node.annotation)):
                breaches.append(Breach(rel, node.lineno, "a ledger function takes a callable", node.arg))
        if name == "ledger.gate":
            public = {node.name for node in module.tree.body if isinstance(node, ast.FunctionDef)
                      and not node.name.startswith("_")}
            for extra in sorted(public - GATE_SURFACE):
                breaches.append(Breach(rel, 1, "the gate's surface grew", f"{extra}()"))
    return breaches


def check() -> list[Breach]:
    paths = project_files()
    known = {module_name(p) for p in paths}
    modules = {m.name: m for m in (Module(p, known) for p in paths)}
    breaches: list[Breach] = []
    for module in modules.values():
        lines = len(module.source.splitlines())
        if module.source.strip() and not ast.get_docstring(module.tree) and not _excepted(module.rel):
            breaches.append(Breach(module.rel, 1, "no purpose stated", "the module has no docstring"))
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
    breaches += architecture(modules)
    breaches += [Breach("docs/configuration.md", 1, "configuration table", problem)
                 for problem in env_inventory.problems()]
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
