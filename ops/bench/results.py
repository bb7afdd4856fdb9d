"""The benchmark's results: rows of figures, the Markdown table, and where it is written."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from ops.bench.sizes import Sizes

BEGIN, END = "<!-- bench:results:begin -->", "<!-- bench:results:end -->"


@dataclass
class Row:
    section: str
    figure: str
    result: str
    target: str = ""
    ok: bool | None = None

    @property
    def verdict(self) -> str:
        return {True: "met", False: "**missed**", None: "—"}[self.ok]


@dataclass
class Results:
    sizes: Sizes
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    machine: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)
    seconds: float = 0.0

    def add(self, *args, **kwargs) -> Row:
        row = Row(*args, **kwargs)
        self.rows.append(row)
        return row

    def table(self) -> str:
        lines = ["| # | figure | result | target | |", "|---|---|---|---|---|"]
        for r in self.rows:
            lines.append(f"| {r.section} | {r.figure} | {r.result} | {r.target or '—'} | {r.verdict} |")
        return "\n".join(lines)

    def machine_block(self) -> str:
        m = self.machine
        return "\n".join(f"- **{k}**: {v}" for k, v in m.items() if k != "command")

    def markdown(self) -> str:
        parts = [f"Run: `{self.machine.get('command', 'python -m ops bench')}` — sizes **{self.sizes.name}**, "
                 f"{self.seconds:.0f} s wall time.", "", self.machine_block(), "", self.table()]
        if self.notes:
            parts += ["", *[f"- {n}" for n in self.notes]]
        return "\n".join(parts)


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def write_doc(path: Path, results: Results) -> None:
    """Replace the results block of docs/benchmarks.md (the rest is prose)."""
    block = f"{BEGIN}\n{results.markdown()}\n{END}"
    text = path.read_text() if path.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def write_raw(results: Results) -> Path:
    path = Path(settings.VAR_DIR) / "bench" / "last-run.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"sizes": results.sizes.name, "machine": results.machine, "raw": results.raw,
                                "rows": [vars(r) for r in results.rows], "notes": results.notes}, indent=2,
                               default=str))
    return path
