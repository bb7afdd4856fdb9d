"""The architecture's never-rules (`docs/design.md`, "Layers"), checked by `make structure` on its modules.

Each breach is a `Found` (path, line, rule, detail); `check_structure` lists them with the rest.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple


class Found(NamedTuple):
    path: str
    line: int
    rule: str
    detail: str


SCHEDULING = ("ticketagent.scheduling",)
QUEUE_LIBRARIES = ("rq", "django_rq", "redis")
GATE_SURFACE = {"intent_prepare", "intent_record", "effect_perform", "outcome_record"}
GONE = {"Fence", "Rider", "effect_call", "outcome_fence", "fold", "intent_commit", "lease_fence"}
PIPELINE_STATEMENTS = "ticketagent.pipeline.statements"  # the pipeline's one module of SQL


def _registered_actions(root: Path) -> set[str]:
    """The action names of the owner's table (`ticketagent/actions.py`: `ActionSpec("name", …)`)."""
    tree = ast.parse((root / "ticketagent" / "actions.py").read_text())
    return {node.args[0].value for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "ActionSpec" and node.args
            and isinstance(node.args[0], ast.Constant)}


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def _external_imports(module) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def _ledger_names(module, actions: set[str]) -> list[Found]:
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
                breaches.append(Found(module.rel, node.lineno, "the ledger names its owner", f"{word[:60]!r}"))
                break
    return breaches


def _layers(module) -> list[Found]:
    """Who may import whom: the ledger nothing of its owner; the pipeline and the services nothing of scheduling
    nor of the queue; the ledger's SQL module nobody outside the ledger."""
    found, name, rel = [], module.name, module.rel
    if name.split(".")[0] == "ledger":
        found += [Found(rel, line, "the ledger imports its owner", target) for target, line in module.imports.items()
                  if target.split(".")[0] in ("ticketagent", "ops", "sandbox")]
    if name.startswith(("ticketagent.pipeline", "ticketagent.services")):
        found += [Found(rel, line, "the pipeline or a service imports scheduling", target)
                  for target, line in module.imports.items() if target.startswith(SCHEDULING)]
        found += [Found(rel, line, "the pipeline or a service imports the queue", top)
                  for line, top in _external_imports(module) if top in QUEUE_LIBRARIES]
    if "ledger.statements" in module.imports and name.split(".")[0] != "ledger":
        found.append(Found(rel, module.imports["ledger.statements"], "the ledger's SQL used outside it",
                           "ledger.statements"))
    return found


def _node_rule(module, node: ast.AST) -> Found | None:
    """The never-rule `node` breaks, if any: the folded protocol, a vendor branch, the pipeline's own SQL, a
    ledger function taking a callable."""
    name, rel = module.name, module.rel
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in GONE:
        return Found(rel, node.lineno, "the folded protocol is back", node.name)
    if isinstance(node, ast.Attribute) and getattr(node.value, "id", "") == "connection":
        if node.attr == "vendor":
            return Found(rel, node.lineno, "a database vendor branch", "connection.vendor")
        if node.attr == "cursor" and name.startswith("ticketagent.pipeline") and name != PIPELINE_STATEMENTS:
            return Found(rel, node.lineno, "the pipeline runs SQL of its own", "cursor()")
    if (name.split(".")[0] == "ledger" and isinstance(node, ast.arg) and node.annotation is not None
            and "Callable" in ast.unparse(node.annotation)):
        return Found(rel, node.lineno, "a ledger function takes a callable", node.arg)
    return None


def breaches(modules: dict, root: Path) -> list[Found]:
    """Every breach of the never-rules in `modules` (check_structure's `Module`s by name); `root`: the tree's."""
    found: list[Found] = []
    actions = _registered_actions(root)
    for module in modules.values():
        found += _layers(module)
        if module.name.split(".")[0] == "ledger":
            found += _ledger_names(module, actions)
        found += [hit for node in ast.walk(module.tree) if (hit := _node_rule(module, node)) is not None]
        if module.name == "ledger.gate":
            public = {node.name for node in module.tree.body if isinstance(node, ast.FunctionDef)
                      and not node.name.startswith("_")}
            found += [Found(module.rel, 1, "the gate's surface grew", f"{extra}()")
                      for extra in sorted(public - GATE_SURFACE)]
    return found
