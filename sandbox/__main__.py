"""``python -m sandbox``: the command line that runs one sandbox helpdesk and mail server.

    python -m sandbox --port 8025 --smtp-port 8026 --db var/sandbox.sqlite3 [--ignore-keys] [--quiet]

See ``docs/sandbox.md``.
"""

from __future__ import annotations

import argparse
import sys

from sandbox.server import serve


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sandbox",
        description="Sandbox helpdesk (HTTP JSON API) + mail server (SMTP).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8025, help="HTTP port (0 = pick a free one)")
    parser.add_argument("--smtp-port", type=int, default=8026, help="SMTP port (0 = pick a free one)")
    parser.add_argument("--db", default=None, help="SQLite file for deliveries (default: in-memory)")
    parser.add_argument(
        "--ignore-keys",
        action="store_true",
        help="record every request; do not dedupe on Idempotency-Key/Message-ID",
    )
    parser.add_argument("--quiet", action="store_true", help="do not log requests to stderr")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return serve(
        host=args.host,
        port=args.port,
        smtp_port=args.smtp_port,
        db=args.db,
        honor_keys=not args.ignore_keys,
        quiet=args.quiet,
    )


if __name__ == "__main__":
    sys.exit(main())
