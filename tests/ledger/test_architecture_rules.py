"""`make structure` keeps the architecture's never-rules: the tree passes, and each rule fails on a tree that
breaks it (a small copy of the layout, with one breach each)."""

import ast
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
        "ticketagent/scheduling/__init__.py": '"""Scheduling."""\n',
        "ticketagent/scheduling/window.py": '"""The window."""\n',
        "ticketagent/models.py": '"""Models."""\n',
        "ticketagent/pipeline/__init__.py": '"""The pipeline."""\n',
        "ticketagent/services/__init__.py": '"""The services."""\n',
    }
    for rel, text in {**base, **files}.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def rules(structure, monkeypatch, root: Path, adapters: dict | None = None) -> set[str]:
    monkeypatch.setattr(structure, "ROOT", root)
    monkeypatch.setattr(structure, "ADAPTERS", adapters or {})
    return {breach.rule for breach in structure.check()}


def test_the_tree_keeps_every_rule(structure):
    assert structure.check() == []


@pytest.mark.parametrize(("files", "rule"), [
    ({"ledger/x.py": '"""X."""\nfrom ticketagent.models import Item\n'}, "the ledger imports its owner"),
    ({"ledger/x.py": '"""X."""\nWHAT = "save_draft"\n'}, "the ledger names its owner"),
    ({"ledger/x.py": '"""X."""\n\n\ndef ticket_of(effect):\n    return effect\n'}, "the ledger names its owner"),
    ({"ticketagent/pipeline/x.py": '"""X."""\nfrom ticketagent.scheduling import window\n'},
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
    ({"ticketagent/x.py": '"""X."""\nfrom django.db import connection\nconnection.health_check_done = True\n'},
     "a library's object written outside its adapter"),
    ({"ticketagent/x.py": '"""X."""\n\n\ndef f(conn, cls):\n    conn.__class__ = cls\n'},
     "a library's object written outside its adapter"),
    ({"ticketagent/x.py": '"""X."""\n\n\nclass T:\n    def f(self, b):\n        self._pool._backend = b\n'},
     "a library's object written outside its adapter"),
    ({"ticketagent/x.py": '"""X."""\n\n\ndef f(row, db):\n    row._state.adding, row._state.db = False, db\n'},
     "a library's object written outside its adapter"),
    ({"ticketagent/x.py": '"""X."""\nimport smtplib\nQ = smtplib._quote_periods\n'},
     "a library's private name used outside its adapter"),
    ({"ticketagent/a/__init__.py": '"""A."""\n', "ticketagent/a/x.py": '"""X."""\nfrom ticketagent.b import y\n',
      "ticketagent/b/__init__.py": '"""B."""\n', "ticketagent/b/y.py": '"""Y."""\nfrom ticketagent.a.z import Z\n',
      "ticketagent/a/z.py": '"""Z."""\nZ = 1\n'}, "package import cycle"),
    ({"ticketagent/x.py": '"""X."""\n\n\ndef f(v):\n' + "".join(f"    if v == {n}:\n        return {n}\n"
                                                               for n in range(20)) + "    return v\n"},
     "function too complex"),
], ids=["ledger-imports-owner", "ledger-names-action", "ledger-names-ticket", "pipeline-imports-window",
        "service-imports-rq", "pipeline-sql", "statements-outside", "folded-protocol", "gate-surface",
        "ledger-callable", "vendor-branch", "library-attribute-written", "class-swapped", "private-of-another",
        "model-state-written", "library-private-read", "package-cycle", "complexity"])
def test_each_rule_fails_on_a_tree_that_breaks_it(structure, monkeypatch, tmp_path, files, rule):
    assert rules(structure, monkeypatch, tree(tmp_path / "clean", {})) == set()
    assert rule in rules(structure, monkeypatch, tree(tmp_path / "broken", files))


def test_an_adapter_module_may_write_to_its_librarys_objects(structure, monkeypatch, tmp_path):
    files = {"ticketagent/conn.py": '"""C."""\nfrom django.db import connection\nconnection.health_check_done = True\n'}
    assert "a library's object written outside its adapter" in rules(structure, monkeypatch, tree(tmp_path / "a",
                                                                                                     files))
    adapters = {"ticketagent/conn.py": ("django", "no public hook")}
    assert rules(structure, monkeypatch, tree(tmp_path / "b", files), adapters) == set()
    twice = {**adapters, "ticketagent/scheduling/window.py": ("django", "a second one")}
    assert "two adapter modules for one library" in rules(structure, monkeypatch, tree(tmp_path / "c", files), twice)


def test_complexity_is_counted_as_radon_counts_it(structure):
    source = textwrap.dedent('''
        def f(a, b, items):
            if a and b or a:          # if: 1, and/or: 2
                return [x for x in items if x]   # comprehension: 1 + 1 if
            for x in items:           # for: 1
                pass
            else:                     # its else: 1
                pass
            try:
                pass
            except ValueError:        # 1
                pass
            except KeyError:          # 1
                pass
            assert a                  # 1
            def inner():              # counted on its own
                if a:
                    return 1
            return 1 if a else 2      # 1
        ''')
    function = ast.parse(source).body[0]
    assert structure.complexity(function) == 12
