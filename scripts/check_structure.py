#!/usr/bin/env python3
"""``make structure``: the layout's promises, checked on every ``make lint``.

Outside ``tests/`` and migrations:

* every module says its one purpose in its docstring's first line (an
  empty ``__init__.py`` may stay empty);
* no module over 500 lines;
* no function (or method) over 60 lines, nor above McCabe complexity 20
  (radon's rank C; counted here with ``ast`` as radon counts it, so the
  check needs nothing installed);
* no private name (``_name``) imported from another module, whether by
  ``from m import _name`` or by ``m._name`` on an imported module (a
  library's too, but in that library's adapter module);
* no import cycle between the project's modules, counting imports inside
  functions too (an import hidden in a function is still a dependency);
  imports under ``if TYPE_CHECKING:`` do not run and are not counted;
* no import cycle between packages either (``ticketagent.services``,
  ``ticketagent.llm``, ...: a module directly in a top-level package counts
  as a package of its own);
* no write to an attribute of a library's object outside that library's one
  adapter module (ADAPTERS, each with why the library offers no public
  hook): an assignment to ``__class__``, to an attribute named ``_like_this``
  anywhere in the target but on ``self``/``cls``, or to an attribute of a
  name imported from a third-party package.

And the architecture's never-rules (`docs/design.md`, "Layers"):

* the ledger imports nothing of ``ticketagent`` (nor ``ops``, ``sandbox``)
  and names no action of the owner's table and no ticket in its code
  (docstrings and comments apart): its owner registers actions and channels;
* the pipeline and the services import nothing of scheduling
  (``ticketagent.scheduling``) nor rq / django_rq / redis: they tell it by
  signals;
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

No module is exempt by name. Exit status 1 on any breach, listing each with
file and line.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import architecture_rules  # noqa: E402
import env_inventory  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ticketagent", "ledger", "sandbox", "ops", "scripts")
SKIP_PARTS = {"migrations", "tests", ".venv", "var", "__pycache__", "node_modules"}
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
MAX_COMPLEXITY = 20  # radon's rank C ends at 20
DOCUMENTED_UNDERSCORED = {"os._exit", "sys._getframe"}  # a library's public API despite the underscore

# The one module per library that may write to that library's objects -> (the library, why no public hook does it).
ADAPTERS: dict[str, tuple[str, str]] = {
    "ticketagent/llm/transport.py": (
        "httpcore2", "httpx's HTTPTransport builds its httpcore pool itself and passes no network backend through"),
    "ticketagent/channels/smtplib_adapter.py": (
        "smtplib", "smtplib has no hook between a message's body and its end-of-data line: DATA is written again"),
    "ops/bench/redis_counter.py": (
        "redis", "redis-py has no hook that sees each command a connection sends (the bench counts round trips)"),
    "ticketagent/scheduling/django_connection.py": (
        "django", "Django has no public way to skip CONN_HEALTH_CHECKS' SELECT 1 for a connection used moments ago"),
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
        self.library_privates: list[tuple[int, str]] = []  # `lib._name` read, `from lib import _name`
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
        libraries: dict[str, str] = {}  # local name -> a module outside the project
        for node in ast.walk(self.tree):
            if id(node) in hidden:
                continue
            if isinstance(node, ast.Import):
                self._collect_import(node, aliases, libraries)
            elif isinstance(node, ast.ImportFrom):
                self._collect_import_from(node, aliases)
        for node in ast.walk(self.tree):
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr)):
                continue
            if node.value.id in aliases:
                self.private_imports.append((node.lineno, f"{aliases[node.value.id]}.{node.attr}"))
            elif (node.value.id in libraries
                  and f"{libraries[node.value.id]}.{node.attr}" not in DOCUMENTED_UNDERSCORED):
                self.library_privates.append((node.lineno, f"{libraries[node.value.id]}.{node.attr}"))

    def _collect_import(self, node: ast.Import, aliases: dict[str, str], libraries: dict[str, str]) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)
            if alias.asname and self._target(alias.name) == alias.name:
                aliases[alias.asname] = alias.name
            elif not self._target(alias.name):
                libraries[alias.asname or alias.name.split(".")[0]] = alias.name

    def _collect_import_from(self, node: ast.ImportFrom, aliases: dict[str, str]) -> None:
        if not node.level and not self._target(node.module or ""):
            self.library_privates += [(node.lineno, f"{alias.name} from {node.module}")
                                      for alias in node.names if _private(alias.name)]
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

    def functions(self):
        """(qualified name, first line, length in lines, node) of every function and method, nested ones too."""
        stack = [(self.tree, "")]
        while stack:
            parent, prefix = stack.pop()
            for node in ast.iter_child_nodes(parent):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    qual = f"{prefix}{node.name}"
                    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                    yield qual, first, node.end_lineno - first + 1, node
                    stack.append((node, qual + "."))
                elif isinstance(node, ast.ClassDef):
                    stack.append((node, f"{prefix}{node.name}."))
                else:
                    stack.append((node, prefix))


def complexity(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """McCabe complexity as radon counts it: 1, plus 1 per `if`, ternary, loop (and its `else`), `except`,
    `try`'s `else` statement, `assert`, `case`, comprehension `for` and `if`, and each `and`/`or` beyond the
    first operand; a function or class defined inside counts on its own, not here."""
    total = 1
    stack = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.Try | getattr(ast, "TryStar", ast.Try)):
            total += len(node.handlers) + len(node.orelse)
        elif isinstance(node, ast.BoolOp):
            total += len(node.values) - 1
        elif isinstance(node, (ast.If, ast.IfExp, ast.Assert)):
            total += 1
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            total += 1 + bool(node.orelse)
        elif isinstance(node, ast.comprehension):
            total += 1 + len(node.ifs)
        elif isinstance(node, ast.match_case):
            total += 1
        stack.extend(ast.iter_child_nodes(node))
    return total


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan); `graph`: node -> {node it imports: line}."""
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
        for nxt in graph[node]:
            if nxt not in graph:
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
    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def package_of(name: str, packages: set[str]) -> str:
    """The package a module belongs to for the package cycle rule: its second-level package
    (`ticketagent.llm` for `ticketagent.llm.schemas`), or the module itself when it sits directly in a
    top-level package (`ticketagent.models`)."""
    second = ".".join(name.split(".")[:2])
    return second if second in packages else name


def package_graph(modules: dict[str, Module]) -> tuple[dict[str, dict[str, int]], dict[tuple[str, str], str]]:
    """Packages -> the packages they import, and for each such edge one import that makes it (`module:line`)."""
    packages = {m.name for m in modules.values() if m.is_package}
    graph: dict[str, dict[str, int]] = {}
    witness: dict[tuple[str, str], str] = {}
    for module in modules.values():
        source = package_of(module.name, packages)
        graph.setdefault(source, {})
        for target, line in module.imports.items():
            into = package_of(target, packages)
            if into != source:
                graph[source].setdefault(into, line)
                witness.setdefault((source, into), f"{module.rel}:{line}")
    return graph, witness


def package_cycles(modules: dict[str, Module]) -> list[Breach]:
    graph, witness = package_graph(modules)
    breaches = []
    for component in cycles(graph):
        members = set(component)
        edges = sorted(f"{a} -> {b} ({witness[a, b]})" for a, b in witness if a in members and b in members)
        breaches.append(Breach(modules[component[0]].rel if component[0] in modules else component[0], 1,
                               "package import cycle", "; ".join(edges)))
    return breaches


def _third_party(top: str, known: set[str]) -> bool:
    return (top not in sys.stdlib_module_names and top != "__future__"
            and top not in {name.split(".")[0] for name in known})


def _library_names(module: Module) -> set[str]:
    """The local names bound to a third-party package or to something imported from one."""
    names: set[str] = set()
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _third_party(alias.name.split(".")[0], module.known):
                    names.add(alias.asname or alias.name.split(".")[0])
        elif (isinstance(node, ast.ImportFrom) and not node.level and node.module
              and _third_party(node.module.split(".")[0], module.known)):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _written(node: ast.AST) -> list[ast.Attribute]:
    """The attributes an assignment, a `del` or a `setattr(obj, "name", …)` writes."""
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, ast.Delete):
        targets = list(node.targets)
    elif (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setattr" and len(node.args) >= 2
          and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
        return [ast.Attribute(value=node.args[0], attr=node.args[1].value, lineno=node.lineno)]
    else:
        return []
    found = []
    while targets:
        target = targets.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            targets.extend(target.elts)
        elif isinstance(target, ast.Starred):
            targets.append(target.value)
        elif isinstance(target, ast.Attribute):
            found.append(target)
    return found


def library_writes(module: Module) -> list[Breach]:
    """Writes to attributes of a library's objects (see the module's docstring for the heuristic)."""
    if module.rel in ADAPTERS:
        return []
    library, breaches = _library_names(module), []
    for node in ast.walk(module.tree):
        for target in _written(node):
            chain, root = [], target
            while isinstance(root, ast.Attribute):
                chain.append(root)
                root = root.value
            text = ast.unparse(target)
            if target.attr == "__class__":
                why = "the class of an object swapped"
            elif any(_private(a.attr) and not (isinstance(a.value, ast.Name) and a.value.id in ("self", "cls"))
                     for a in chain):
                why = "another object's private attribute written"
            elif isinstance(root, ast.Name) and root.id in library:
                why = f"an attribute of {root.id} (a library's) written"
            else:
                continue
            breaches.append(Breach(module.rel, node.lineno, "a library's object written outside its adapter",
                                   f"{text}: {why}"))
    return breaches


def adapters_one_per_library() -> list[Breach]:
    breaches, seen = [], {}
    for rel, (library, _why) in ADAPTERS.items():
        if library in seen:
            breaches.append(Breach(rel, 1, "two adapter modules for one library", f"{library}: also {seen[library]}"))
        seen[library] = rel
        if not (ROOT / rel).exists():
            breaches.append(Breach(rel, 1, "an adapter module that does not exist", library))
    return breaches


def check() -> list[Breach]:
    paths = project_files()
    known = {module_name(p) for p in paths}
    modules = {m.name: m for m in (Module(p, known) for p in paths)}
    breaches: list[Breach] = []
    for module in modules.values():
        lines = len(module.source.splitlines())
        if module.source.strip() and not ast.get_docstring(module.tree):
            breaches.append(Breach(module.rel, 1, "no purpose stated", "the module has no docstring"))
        if lines > MAX_MODULE_LINES:
            breaches.append(Breach(module.rel, 1, "module too long", f"{lines} lines (max {MAX_MODULE_LINES})"))
        for qual, line, length, node in module.functions():
            if length > MAX_FUNCTION_LINES:
                breaches.append(Breach(module.rel, line, "function too long",
                                       f"{qual}() has {length} lines (max {MAX_FUNCTION_LINES})"))
            if (score := complexity(node)) > MAX_COMPLEXITY:
                breaches.append(Breach(module.rel, line, "function too complex",
                                       f"{qual}() has complexity {score} (max {MAX_COMPLEXITY})"))
        for line, what in module.private_imports:
            breaches.append(Breach(module.rel, line, "private name imported", what))
        if module.rel not in ADAPTERS:
            breaches += [Breach(module.rel, line, "a library's private name used outside its adapter", what)
                         for line, what in module.library_privates]
        breaches += library_writes(module)
    for component in cycles({name: m.imports for name, m in modules.items()}):
        first = modules[component[0]]
        chain = " -> ".join(f"{m} (line {modules[m].imports.get(n, '?')})"
                            for m, n in zip(component, [*component[1:], component[0]], strict=True))
        breaches.append(Breach(first.rel, 1, "import cycle", chain))
    breaches += package_cycles(modules)
    breaches += adapters_one_per_library()
    breaches += [Breach(*found) for found in architecture_rules.breaches(modules, ROOT)]
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
    print(f"structure: {n} modules checked; sizes, complexity, private imports, import cycles (modules and "
          "packages) and writes to libraries' objects are within the rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
