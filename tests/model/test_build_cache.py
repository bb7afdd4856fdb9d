"""`make model`'s cache (ops/model.py): keyed by CPU type and sources, checked before anything runs, idempotent."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ops import model
from tests.conftest import skip_or_fail

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture
def empty_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TICKETAGENT_MODEL_DIR", str(tmp_path))
    return tmp_path


def fake_build(cpu: str) -> None:
    """A binary, the model file and a stamp, as a finished build leaves them (the stamp naming `cpu`)."""
    binary = model.server_binary()
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    model.gguf_path().write_bytes(b"GGUF")
    stamp = {"sdist": "==".join(model.SDIST), "cmake_args": list(model.CMAKE_ARGS), "cpu": cpu}
    (model.build_dir() / "built.json").write_text(json.dumps(stamp))


def test_nothing_built_names_the_command_to_run(empty_dir):
    assert not model.is_built()
    with pytest.raises(model.ModelMissing, match=r"run `make model` first \(once; about 5.5 minutes"):
        model.require_built()


def test_a_build_is_used_only_on_the_cpu_type_and_sources_it_was_made_for(empty_dir):
    key, cpu = model.cpu_key()
    assert model.build_dir() == empty_dir / f"build-{key}"
    fake_build(cpu)
    assert model.is_built()
    argv = model.server_argv(8080)
    assert argv[0] == str(model.server_binary()) and "--repeat-penalty" in argv and "--no-webui" in argv
    stamp = model.build_dir() / "built.json"
    stamp.write_text(stamp.read_text().replace(model.SDIST[1], "0.0.1"))
    assert not model.is_built(), "other sources build again"
    stamp.write_text(json.dumps({**json.loads(stamp.read_text()), "sdist": "==".join(model.SDIST), "cpu": "Other"}))
    assert not model.is_built(), "a build for another CPU type is not used"


def test_check_says_whether_the_model_is_built(empty_dir):
    result = subprocess.run([sys.executable, "scripts/model.py", "--check"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1 and "run `make model` first" in result.stderr


def test_a_second_make_model_does_nothing(monkeypatch):
    monkeypatch.delenv("TICKETAGENT_MODEL_DIR", raising=False)
    if not model.is_built():
        skip_or_fail("the local model is not built here: run `make model`")
    result = subprocess.run([sys.executable, "scripts/model.py"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("local model ready:") and "cmake" not in result.stdout
    assert "pip download" not in result.stdout
