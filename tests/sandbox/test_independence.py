"""The sandbox stands apart from the product: it runs without Django, ``ticketagent`` or ``ledger``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, pkgutil, importlib, sys
import sandbox
for info in pkgutil.iter_modules(sandbox.__path__):
    importlib.import_module("sandbox." + info.name)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("django", "ticketagent", "ledger"))))
"""


def test_no_sandbox_module_loads_the_product():
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
