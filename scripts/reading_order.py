#!/usr/bin/env python3
"""``make structure``: "never twice" end to end, in the order a reviewer reads it, within 800 lines and 8 files.

READING_ORDER below is the one list (docs/design.md, "Reading order", shows
what this prints): each file on the path of one effect -- its intent before
the call, the call under the lease's deadline, its outcome fenced by the
claim token, a take-over's intents made unknown, reconcile's rule for a
"not found" -- and the top-level names of it on that path (``None``: the
whole file). Each name counts its whole definition, docstring and
decorators included. Exit status 1 when the path passes MAX_LINES lines or
MAX_FILES files, or names something that is not there.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES, MAX_FILES = 800, 8

READING_ORDER: list[tuple[str, tuple[str, ...] | None]] = [
    ("ticketagent/pipeline/steps.py", ("run_effect_step", "_call", "phase_outcome", "_outcome_phase",
                                       "_after_outcome", "_handed_back", "_intent")),
    ("ticketagent/pipeline/phases.py", ("Locked", "phase", "item_hand_back", "record_steps")),
    ("ticketagent/pipeline/statements.py", None),
    ("ticketagent/pipeline/lease.py", ("Lease", "item_take_over", "ItemRun")),
    ("ledger/gate.py", ("ApprovalRequired", "TransactionMisuse", "Recorded", "intent_prepare", "_in_transaction",
                        "intent_record", "_held_already", "_by_slot", "_retry", "_record_blocked", "effect_perform",
                        "_earlier_attempt_in_doubt", "outcome_record")),
    ("ledger/statements.py", ("write_with_transition", "transition_insert", "intent_row", "insert_intent",
                              "record_outcome")),
    ("ledger/channels/base.py", ("Expired", "CallDeadline")),
    ("ledger/services.py", ("effects_mark_unknown", "effect_not_sent", "reconcile_not_before", "effect_reconcile")),
]


def _lines(path: Path, names: tuple[str, ...] | None) -> int:
    source = path.read_text()
    if names is None:
        return len(source.splitlines())
    found = {}
    for node in ast.parse(source).body:
        name = getattr(node, "name", None)
        if name is None and isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            name = next((t.id for t in targets if isinstance(t, ast.Name)), None)
        if name in names:
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            found[name] = node.end_lineno - first + 1
    missing = set(names) - set(found)
    if missing:
        raise SystemExit(f"reading order: {path.relative_to(ROOT)} has no {', '.join(sorted(missing))}")
    return sum(found.values())


def main() -> int:
    counts = [(rel, names, _lines(ROOT / rel, names)) for rel, names in READING_ORDER]
    for rel, names, lines in counts:
        print(f"{lines:5d}  {rel}" + ("" if names is None else f"  ({', '.join(names)})"))
    total = sum(lines for *_, lines in counts)
    print(f"{total:5d}  lines of product code in {len(counts)} files: \"never twice\" end to end "
          f"(at most {MAX_LINES} in {MAX_FILES})")
    if total > MAX_LINES or len(counts) > MAX_FILES:
        print("reading order: over the bound", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
