"""The real local model (ops/model.py): llama-server built by `make model`, serving SmolLM2-135M-Instruct.

Without the build the tests skip with the reason (with TICKETAGENT_REQUIRE_ALL=1, as in CI, they fail).
Worker processes reach the server through `local_model.env`, the settings `MODEL=local make run` gives
them, with the SDK's retries off: both llama.cpp servers answer a request they refuse with HTTP 500,
which the SDK would otherwise retry.
"""

from dataclasses import dataclass

import pytest

from ops import model
from ops.processes import Processes
from tests.conftest import skip_or_fail

# Answers are capped lower than `make run`'s, for the tests' wall time; a draft still fits.
TEST_MAX_TOKENS = 256
# one model call's bound: a 135M model on two shared cores answers in seconds, but not on a machine loaded to 10
CALL_TIMEOUT = 600


@dataclass
class LocalModel:
    port: int
    env: dict  # for worker processes

    @property
    def base_url(self) -> str:
        return model.base_url(self.port)


@pytest.fixture(scope="session")
def local_model(tmp_path_factory):
    if not model.is_built():
        skip_or_fail(f"no local model server: run `make model` (builds llama-server once, about "
                     f"{model.BUILD_MINUTES:g} min on 2 cores; looked in {model.build_dir()})")
    workdir = tmp_path_factory.mktemp("llama")
    procs = Processes(log_dir=workdir)
    _child, port = model.start_server(procs, log=workdir / "llama-server.log", max_tokens=TEST_MAX_TOKENS)
    # a generous timeout: the model shares two cores with the rest of the suite (two pytest processes)
    # and, on a loaded machine, with whatever else runs there (one call took over 180 s at a load of 10)
    env = {**model.client_env(port), "OPENAI_MAX_RETRIES": "0", "OPENAI_TIMEOUT": str(CALL_TIMEOUT)}
    yield LocalModel(port, env)
    procs.stop(grace=5)


@pytest.fixture
def on_local_model(local_model, settings):
    """This process's settings pointed at the local model (in-process model calls)."""
    settings.OPENAI_API_KEY = local_model.env["OPENAI_API_KEY"]
    settings.OPENAI_BASE_URL = local_model.base_url
    settings.OPENAI_MODEL = local_model.env["OPENAI_MODEL"]
    settings.OPENAI_MAX_RETRIES = 0
    settings.OPENAI_TIMEOUT = float(CALL_TIMEOUT)
    return local_model
