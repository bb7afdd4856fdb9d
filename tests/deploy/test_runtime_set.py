"""requirements.txt is the whole runtime set: every library a product module imports is named in it.

`make run` installs requirements.txt alone, and PyYAML reached the suite only through a dev tool: a fresh clone's
`make run` stopped at `migrate` while `make test` passed. `scripts/check_runtime.py` reads every product module's
imports; `.ci/run` also runs it with `--import-all` in a venv made from requirements.txt alone before the suite.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
CHECK = [sys.executable, str(ROOT / "scripts" / "check_runtime.py")]


def check(requirements: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*CHECK, "--requirements", str(requirements)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_every_import_of_the_product_is_in_requirements_txt():
    result = check(ROOT / "requirements.txt")
    assert result.returncode == 0, result.stderr


def test_a_library_missing_from_the_runtime_set_fails_with_its_name_and_module(tmp_path):
    trimmed = tmp_path / "requirements.txt"
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    trimmed.write_text("\n".join(line for line in lines if not line.lower().startswith("pyyaml")) + "\n")
    result = check(trimmed)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ticketagent/playbooks/files.py imports yaml (from PyYAML), which requirements.txt does not name" \
        in result.stderr, result.stderr


def test_ci_checks_the_runtime_set_in_a_venv_of_its_own_before_the_suite():
    ci = "\n".join(line for line in (ROOT / ".ci" / "run").read_text().splitlines()
                   if not line.lstrip().startswith("#"))
    runtime = ci.index("check_runtime.py --import-all")
    assert ci.index("-r requirements.txt") < runtime < ci.index("make test"), "runtime-only venv first"
    assert "requirements-dev.txt" not in ci[:runtime], "nothing of the dev set before the runtime check"


def test_redis_replies_are_parsed_by_hiredis():
    """requirements.txt names hiredis so that redis-py parses replies in C (every item makes ~15 Redis round
    trips: the queue, the governors' scripts, the window); docs/benchmarks.md, figure 29."""
    import redis
    from redis._parsers import _HiredisParser
    from redis.connection import DefaultParser

    assert DefaultParser is _HiredisParser, "redis-py found no hiredis >= 3.2: pip install -r requirements.txt"
    connection = redis.Redis.from_url("redis://127.0.0.1:6379/0").connection_pool.make_connection()
    assert isinstance(connection._parser, _HiredisParser), type(connection._parser)
