"""`make structure` keeps the architecture's never-rules: the tree passes, and each rule fails on a tree that
breaks it (a small copy of the layout, with one breach each)."""

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def structure():
    spec = importlib.util.spec_from_file_location("check_structure", ROOT / "scripts" / "check_structure.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    base = {
        "ledger/__init__.py": '"""The ledger."""\n',
        "ledger/gate.py": '"""The gate."""\n\n\ndef intent_record(intent):\n    return intent\n',
        "ticketagent/__init__.py": '"""The app."""\n',
        "ticketagent/actions.py": '"""Actions."""\nACTIONS = [ActionSpec("save_draft", "overwrite", "helpdesk", "")]\n',
        "ticketagent/window.py": '"""The window."""\n',
        "ticketagent/models.py": '"""Models."""\n',
        "ticketagent/pipeline/__init__.py": '"""The pipeline."""\n',
        "ticketagent/services/__init__.py": '"""The services."""\n',
    }
    for rel, text in {**base, **files}.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def rules(structure, monkeypatch, root: Path) -> set[str]:
    monkeypatch.setattr(structure, "ROOT", root)
    return {breach.rule for breach in structure.check()}


def test_the_tree_keeps_every_rule(structure):
    assert structure.check() == []


@pytest.mark.parametrize(("files", "rule"), [
    ({"ledger/x.py": '"""X."""\nfrom ticketagent.models import Item\n'}, "the ledger imports its owner"),
    ({"ledger/x.py": '"""X."""\nWHAT = "save_draft"\n'}, "the ledger names its owner"),
    ({"ledger/x.py": '"""X."""\n\n\ndef ticket_of(effect):\n    return effect\n'}, "the ledger names its owner"),
    ({"ticketagent/pipeline/x.py": '"""X."""\nfrom ticketagent import window\n'},
     "the pipeline or a service imports scheduling"),
    ({"ticketagent/services/x.py": '"""X."""\nimport django_rq\n'}, "the pipeline or a service imports the queue"),
    ({"ticketagent/pipeline/x.py": '"""X."""\nfrom django.db import connection\nconnection.cursor()\n'},
     "the pipeline runs SQL of its own"),
    ({"ticketagent/web.py": '"""X."""\nfrom ledger.statements import record_outcome\n',
      "ledger/statements.py": '"""SQL."""\n'}, "the ledger's SQL used outside it"),
    ({"ledger/gate.py": '"""The gate."""\n\n\ndef effect_call(intent):\n    return intent\n'},
     "the folded protocol is back"),
    ({"ledger/gate.py": '"""The gate."""\n\n\ndef effect_go(intent):\n    return intent\n'},
     "the gate's surface grew"),
    ({"ledger/x.py": '"""X."""\nfrom collections.abc import Callable\n\n\ndef run(then: Callable):\n    return then\n'},
     "a ledger function takes a callable"),
    ({"ticketagent/x.py": '"""X."""\nfrom django.db import connection\nV = connection.vendor\n'},
     "a database vendor branch"),
], ids=["ledger-imports-owner", "ledger-names-action", "ledger-names-ticket", "pipeline-imports-window",
        "service-imports-rq", "pipeline-sql", "statements-outside", "folded-protocol", "gate-surface",
        "ledger-callable", "vendor-branch"])
def test_each_rule_fails_on_a_tree_that_breaks_it(structure, monkeypatch, tmp_path, files, rule):
    assert rules(structure, monkeypatch, tree(tmp_path / "clean", {})) == set()
    assert rule in rules(structure, monkeypatch, tree(tmp_path / "broken", files))
