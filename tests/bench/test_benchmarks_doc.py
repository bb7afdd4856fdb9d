"""docs/benchmarks.md stays a results page: the current results (the one block `make bench` writes), how to run
them and what they decided, in at most 300 lines; the dated runs live in git. A section another file cites by
name is still there. Cheap: it reads files, no services."""

import os
import re
from pathlib import Path

from ops.bench.results import BEGIN, END

ROOT = Path(__file__).resolve().parent.parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
CITED = re.compile(r'benchmarks\.md`?,\s*"([^"]+)"')


def _sources():
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in {"node_modules", "var", "__pycache__"}]
        for name in files:
            path = Path(top) / name
            if path.suffix in {".py", ".md"} and path != DOC:
                yield path


def _headings(text: str) -> list[str]:
    return [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]


def test_the_page_is_short_and_has_one_results_block():
    text = DOC.read_text()
    lines = text.count("\n") + (not text.endswith("\n"))
    assert lines <= 300, f"docs/benchmarks.md has {lines} lines (at most 300: dated runs belong in git history)"
    assert text.count(BEGIN) == 1 and text.count(END) == 1, "exactly one results block"
    assert text.index(BEGIN) < text.index(END)


def test_every_section_cited_by_name_is_a_heading_of_the_page():
    headings = _headings(DOC.read_text())
    cited = {}
    for path in _sources():
        for name in CITED.findall(" ".join(path.read_text(errors="replace").split())):
            cited.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert cited, "no citation found: the search looks in the wrong place"
    missing = {name: where for name, where in cited.items() if not any(name in h for h in headings)}
    assert not missing, f"cited sections not among docs/benchmarks.md's headings: {missing}"
