"""A newcomer's first hour: what the README promises matches what the code does, and the commands explain themselves.

The README's Python version is pyproject's; it says how to change the port and
how to get a private Redis; `make run` refuses an unknown MODEL and says to run
`make model` when the local model is not built, before it starts anything;
its banner gives a second shell the line that reaches its private servers;
`killtest --help` and `replay --help` document every argument.
"""

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ops.management.commands.killtest import Command as KilltestCommand
from ticketagent.management.commands.replay import Command as ReplayCommand

ROOT = Path(__file__).resolve().parent.parent.parent
README = (ROOT / "README.md").read_text()
_spec = importlib.util.spec_from_file_location("make_run_script", ROOT / "scripts" / "run.py")
run_py = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_py)


def help_text(command, name: str) -> str:
    return " ".join(command().create_parser("manage.py", name).format_help().split())


def test_killtest_help_documents_each_option_with_its_default():
    text = help_text(KilltestCommand, "killtest")
    for option, default in (("--rounds", "5"), ("--items", "20"), ("--workers", "2"), ("--round-timeout", "120.0")):
        described = re.search(re.escape(option) + r" [A-Z_]+ (.+?)\(default: ([^)]*)\)", text)
        assert described, f"{option} has no help text with its default:\n{text}"
        assert described.group(2) == default, (option, described.group(2))


def test_replay_help_describes_its_argument():
    text = help_text(ReplayCommand, "replay")
    assert re.search(r"positional arguments: TASK the id of the task", text), text


def test_the_readme_python_version_is_the_one_pyproject_requires():
    required = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert required == ">=3.11"
    assert "Python 3.11 or newer" in README
    assert not re.search(r"Python 3\.(?:[0-9]|10)\b", README), "an older Python version is named"


def test_the_readme_says_how_to_change_the_port_and_how_to_get_a_private_redis():
    assert "PORT=8080 make run" in README
    assert "127.0.0.1:6379" in README and "TICKETAGENT_REDIS_SERVER=system make run" in README
    assert "printed once" not in README, "the banner shows the admin password at every start"
    assert "at every start" in README


def test_the_banner_gives_a_second_shell_everything_manage_py_needs_and_no_secret():
    env = {"DATABASE_URL": "postgres://postgres@%2Fhome%2Fme%2Fvar%2Fpostgres/ticketagent",
           "REDIS_URL": "redis://127.0.0.1:40123/0", "HELPDESK_URL": "http://127.0.0.1:8025",
           "EMAIL_HOST": "127.0.0.1", "EMAIL_PORT": "8026", "HELPDESK_PASSWORD": "s3cret",
           "OPENAI_BASE_URL": "http://127.0.0.1:40124/v1", "OPENAI_API_KEY": "local", "OPENAI_MODEL": "SmolLM2-135M"}
    line = run_py.second_shell(env, "")
    assert line == ("export DATABASE_URL=postgres://postgres@%2Fhome%2Fme%2Fvar%2Fpostgres/ticketagent "
                    "REDIS_URL=redis://127.0.0.1:40123/0 HELPDESK_URL=http://127.0.0.1:8025 EMAIL_HOST=127.0.0.1 "
                    "EMAIL_PORT=8026")
    assert run_py.second_shell(env, "local") == line + (
        " OPENAI_BASE_URL=http://127.0.0.1:40124/v1 OPENAI_API_KEY=local OPENAI_MODEL=SmolLM2-135M")
    assert "s3cret" not in run_py.second_shell(env, "local")


@pytest.mark.parametrize("ports,words", [
    ({"SANDBOX_PORT": "x"}, "SANDBOX_PORT='x' is not a whole number"),
    ({"SANDBOX_PORT": "{taken}"}, "port {taken} (SANDBOX_PORT) is already in use"),
])
def test_make_run_honours_the_sandbox_ports_it_documents(tmp_path, ports, words):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        env = {k: v.format(taken=port) for k, v in ports.items()}
        result = make_run(tmp_path, **env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert words.format(taken=port) in result.stdout + result.stderr
    assert "== migrate" not in result.stdout, "checked before anything starts"


def make_run(tmp_path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "scripts/run.py"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TICKETAGENT_VAR_DIR": str(tmp_path / "var"), **env})


@pytest.mark.parametrize("value,words", [
    ("gpt", "MODEL='gpt': the one value is `local`"),
    ("local", "run `make model` first"),
])
def test_make_run_checks_model_before_it_starts_anything(tmp_path, value, words):
    result = make_run(tmp_path, MODEL=value, TICKETAGENT_MODEL_DIR=str(tmp_path / "no-model"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert words in result.stdout + result.stderr
    assert "== migrate" not in result.stdout, "nothing was started"
    assert not (tmp_path / "var" / "postgres").exists(), "not even the private PostgreSQL"


def test_the_readme_starts_with_the_two_commands():
    block = README.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split("#")[0].strip() for line in block[:2]] == ["make run", "make test"]
