"""docs/configuration.md's table lists exactly the environment variables the product's code reads.

Cheap: it reads source files and the page, no services. The inventory is scripts/env_inventory.py's (the same
check `make structure` runs).
"""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def _inventory():
    spec = importlib.util.spec_from_file_location("env_inventory", ROOT / "scripts" / "env_inventory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_variable_read_is_in_the_table_and_every_row_is_read():
    inventory = _inventory()
    found, unseen = inventory.reads()
    assert found, "the inventory found no reads at all: it is looking in the wrong place"
    assert not unseen, unseen
    assert inventory.problems() == []


def test_a_read_missing_from_the_table_or_a_row_nothing_reads_is_named(tmp_path):
    inventory = _inventory()
    stray = tmp_path / "stray.py"
    stray.write_text('import os\nfrom ticketagent.env import envint\n'
                     'A = os.environ.get("STRAY_ONE")\nB = envint("STRAY_TWO", 1)\nC = os.environ[NAME]\n')
    found, unseen = inventory.reads([stray], root=tmp_path)
    assert found == {"STRAY_ONE": ["stray.py:3"], "STRAY_TWO": ["stray.py:4"]}
    assert unseen == ["stray.py:5: reads the environment by a name not written out (NAME)"]
    table = "## The variables\n\n| variable | default |\n|---|---|\n| `STRAY_ONE` / `GONE` | 1 |\n## Next\n| `X` |\n"
    assert inventory.documented(table) == {"STRAY_ONE", "GONE"}
    problems = inventory.problems(found, inventory.documented(table))
    assert any(p.startswith("STRAY_TWO is read (stray.py:4)") for p in problems), problems
    assert any(p.startswith("GONE is in docs/configuration.md's table") for p in problems), problems
    assert len(problems) == 2, problems


def test_the_product_reads_at_most_sixty_variables():
    """Knobs with one right value are constants (docs/configuration.md, "Fixed values"); the count is every
    variable the table lists, the web server's own (gunicorn: PORT, WEB_BIND, WEB_CONCURRENCY, WEB_ACCESS_LOG)
    included."""
    inventory = _inventory()
    found, _ = inventory.reads()
    assert inventory.MAX_VARIABLES == 60
    assert len(found) <= 60, sorted(found)
    many = {f"VAR_{i}": ["x.py:1"] for i in range(61)}
    assert inventory.problems(many, set(many)) == [
        "the product's code reads 61 variables, more than 60: make the ones with one right value constants "
        "(docs/configuration.md, \"Fixed values\")"]
