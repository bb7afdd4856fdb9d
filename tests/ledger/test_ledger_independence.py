"""`ledger` could be lifted into another project: it never imports `ticketagent`."""

import ast
from pathlib import Path

LEDGER = Path(__file__).resolve().parents[2] / "ledger"


def test_ledger_imports_nothing_from_ticketagent():
    offenders = []
    for path in LEDGER.rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.relative_to(LEDGER.parent)}:{node.lineno} {n}" for n in names
                          if n == "ticketagent" or n.startswith("ticketagent.")]
    assert offenders == []
    assert len(list(LEDGER.rglob("*.py"))) > 5, "the scan found the ledger's modules"
