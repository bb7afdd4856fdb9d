"""`python -m ops bench`: what durability costs, measured side by side.

The command never benchmarks the database you work in. It runs in two
steps:

1. (this process) pick the bench database -- `--database-url`, else
   BENCH_DATABASE_URL, else the configured DATABASE_URL's server with the
   database name `<name>_bench` (a name already ending in `_bench` is used
   as it is), else `postgres://postgres@127.0.0.1:5432/ticketagent_bench`
   -- create it if it is missing, and pick the bench Redis: BENCH_REDIS_URL,
   else the configured REDIS_URL with db 7 (a private redis-server is started
   if that one does not answer);
2. run itself again with DATABASE_URL, REDIS_URL and RQ_QUEUE
   (`ticketagent-bench`) pointing there, migrate, and run the figures
   (ops/bench/runner.py), then print the table and write it into
   docs/benchmarks.md.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import dj_database_url
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

CHILD = "TICKETAGENT_BENCH_CHILD"
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/ticketagent_bench"
BENCH_QUEUE = "ticketagent-bench"
BENCH_REDIS_DB = 7


def bench_database_url(explicit: str = "") -> str:
    if explicit:
        return explicit
    if os.environ.get("BENCH_DATABASE_URL", "").strip():
        return os.environ["BENCH_DATABASE_URL"].strip()
    configured = os.environ.get("DATABASE_URL", "").strip()
    if configured.startswith(("postgres://", "postgresql://")):
        parsed = dj_database_url.parse(configured)
        name = parsed["NAME"] or "ticketagent"
        if name.endswith("_bench"):
            return configured
        base, _, _ = configured.partition("?")
        return base.rsplit("/", 1)[0] + f"/{name}_bench"
    return DEFAULT_DB


def ensure_database(url: str) -> bool:
    """Create the PostgreSQL database if it is missing; True if created."""
    import psycopg
    from psycopg import sql

    db = dj_database_url.parse(url)
    if db["ENGINE"] != "django.db.backends.postgresql":
        raise CommandError(f"the benchmark runs on PostgreSQL; {db['ENGINE']} is not ({url!r})")
    params = {"host": db["HOST"] or "127.0.0.1", "port": db["PORT"] or 5432, "user": db["USER"] or "postgres",
              "dbname": "postgres", "connect_timeout": 5}
    if db["PASSWORD"]:
        params["password"] = db["PASSWORD"]
    try:
        with psycopg.connect(**params, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]).fetchone()
            if exists:
                return False
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db["NAME"])))
            return True
    except psycopg.Error as exc:
        raise CommandError(f"cannot reach or create the bench database {db['NAME']!r} on "
                           f"{params['host']}:{params['port']}: {str(exc).strip().splitlines()[0]}") from None


def _redacted(url: str) -> str:
    db = dj_database_url.parse(url)
    return url.replace(f":{db['PASSWORD']}@", ":***@") if db.get("PASSWORD") else url


class Command(BaseCommand):
    help = ("Benchmarks: the durable pipeline against a naive job and against the same pipeline on DBOS "
            "Transact, the gate against two bare writes, writes per item, latency-bound throughput, uploads, "
            "fair queues, unknowns under faults, dashboard, dry-run, replay and SIGKILL recovery. Writes the table "
            "to docs/benchmarks.md. Uses a dedicated database (see --database-url), never the dev data.")

    def add_arguments(self, parser):
        size = parser.add_mutually_exclusive_group()
        size.add_argument("--quick", action="store_true", help="small sizes, a few minutes (the default)")
        size.add_argument("--full", action="store_true",
                          help="full sizes: 1,000 tickets per latency run, more requests and kills")
        size.add_argument("--sizes", choices=["quick", "full", "tiny"], default=None,
                          help="(tiny: for the smoke test only)")
        parser.add_argument("--only", default="", help="comma list of sections: overhead, gate, latency, kill, "
                                                       "dashboard, dryrun, replay, peer, writes, upload, "
                                                       "fairness, unknowns, window, inflight, ratelimit "
                                                       "(default: all)")
        parser.add_argument("--database-url", default="",
                            help=f"the bench database (default: BENCH_DATABASE_URL, else <DATABASE_URL>_bench, "
                                 f"else {DEFAULT_DB})")
        parser.add_argument("--output", default="docs/benchmarks.md", help="the doc whose table is replaced")
        parser.add_argument("--no-write", action="store_true", help="print the table only")
        parser.add_argument("--fresh-dataset", action="store_true",
                            help="rebuild the 100k-item dataset even if an intact one from an earlier run is "
                                 "there (it is reused by default: loading takes minutes)")
        parser.add_argument("--profile", default="",
                            help="comma list of sections to run under cProfile (overhead profiles the pipeline "
                                 "in-process; latency does too, with the OpenAI SDK against a model answering at once; "
                                 "gate, dashboard, dryrun, replay); reports go to var/bench/")
        parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                            help="change one size of the preset, e.g. --set inflight_threads=100 or "
                                 "--set peer_items=300 (repeatable; names: ops/bench/sizes.py)")
        parser.add_argument("--in-place", action="store_true",
                            help="run against the configured database and Redis as they are (no dedicated "
                                 "database; the tables of ticketagent and ledger are emptied!)")

    def handle(self, *args, **opts):
        from ops.bench.runner import SECTIONS

        only = [s.strip() for s in opts["only"].split(",") if s.strip()] or list(SECTIONS)
        unknown = set(only) - set(SECTIONS)
        if unknown:
            raise CommandError(f"--only: unknown section(s) {', '.join(sorted(unknown))}; "
                               f"use {', '.join(SECTIONS)}")
        profile = {s.strip() for s in opts["profile"].split(",") if s.strip()}
        from ops.bench.sizes import SIZES, sizes_changed

        preset = SIZES[opts["sizes"] or ("full" if opts["full"] else "quick")]
        try:
            opts["sizes_chosen"] = sizes_changed(preset, opts["set"])
        except ValueError as exc:
            raise CommandError(f"--set: {exc}") from exc
        if os.environ.get(CHILD) == "1" or opts["in_place"]:
            return self._run(opts, only, profile)
        return self._launch(opts)

    # ---------------------------------------------------------------- step 1
    def _launch(self, opts) -> None:
        url = bench_database_url(opts["database_url"])
        if ensure_database(url):
            self.stdout.write(f"created the bench database {_redacted(url)}")
        redis_url, redis_proc = self._bench_redis()
        env = dict(os.environ)
        for name in ("LEASE_SECONDS", "RECOVER_INTERVAL_SECONDS", "OPENAI_BASE_URL", "TEST_DATABASE_URL"):
            env.pop(name, None)  # the defaults are what is measured
        env.update({
            CHILD: "1", "DATABASE_URL": url, "REDIS_URL": redis_url, "RQ_QUEUE": BENCH_QUEUE,
            "DJANGO_SETTINGS_MODULE": "ops.settings", "OPENAI_API_KEY": "",  # (its workers: the product's)
            # production-like: no per-query bookkeeping of DEBUG
            "DEBUG": "false", "SECRET_KEY": secrets.token_urlsafe(64),
            "ALLOWED_HOSTS": "testserver,127.0.0.1,localhost", "SECURE_SSL_REDIRECT": "false",
            "SECURE_HSTS_SECONDS": "0", "PYTHONUNBUFFERED": "1",
        })
        self.stdout.write(f"bench database {_redacted(url)}, Redis {redis_url}, queue {BENCH_QUEUE}")
        argv = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "bench", *self._passthrough(opts)]
        try:
            rc = subprocess.call(argv, env=env, cwd=str(settings.BASE_DIR))
        finally:
            if redis_proc is not None:
                sys.path.insert(0, str(Path(settings.BASE_DIR) / "scripts"))
                import ensure_redis

                ensure_redis.stop_process(redis_proc, timeout=5)
        if rc:
            raise CommandError(f"the benchmark failed (exit {rc})")

    @staticmethod
    def _passthrough(opts) -> list[str]:
        out = []
        if opts["full"]:
            out.append("--full")
        if opts["sizes"]:
            out += ["--sizes", opts["sizes"]]
        for name in ("only", "output", "profile"):
            if opts[name]:
                out += [f"--{name}", opts[name]]
        for change in opts["set"]:
            out += ["--set", change]
        for name in ("no_write", "fresh_dataset"):
            if opts[name]:
                out.append("--" + name.replace("_", "-"))
        return out

    def _bench_redis(self):
        sys.path.insert(0, str(Path(settings.BASE_DIR) / "scripts"))
        import ensure_redis

        wanted = os.environ.get("BENCH_REDIS_URL", "").strip() or ensure_redis.with_db(settings.REDIS_URL,
                                                                                       BENCH_REDIS_DB)
        if ensure_redis.ping(wanted):
            return wanted, None
        self.stdout.write(f"{ensure_redis.redacted(wanted)} does not answer; starting a private redis-server")
        binary = ensure_redis.find_server_binary()
        proc, url, _ = ensure_redis.start_server(binary, workdir=Path(settings.VAR_DIR) / "bench" / "redis",
                                                 name="redis-bench")
        return ensure_redis.with_db(url, BENCH_REDIS_DB), proc

    # ---------------------------------------------------------------- step 2
    def _run(self, opts, only, profile) -> None:
        from ops.bench.results import write_doc, write_raw
        from ops.bench.runner import Bench
        sizes = opts["sizes_chosen"]
        call_command("migrate", verbosity=0, interactive=False)
        if not settings.DEBUG:  # the pages are rendered as in production: hashed static names need the manifest
            call_command("collectstatic", verbosity=0, interactive=False)
        bench = Bench(sizes=sizes, only=only, out=self.stdout, profile=profile, reuse_dataset=not opts["fresh_dataset"])
        results = bench.run()
        flags = ["--full" if sizes.name == "full" else "", f"--only {opts['only']}" if opts["only"] else "",
                 *(f"--set {change}" for change in opts["set"])]
        results.machine = {"command": " ".join(["python -m ops bench", *filter(None, flags)]), **results.machine}
        self.stdout.write("")
        self.stdout.write(results.markdown())
        raw = write_raw(results)
        self.stdout.write(f"\nraw numbers: {raw}")
        if not opts["no_write"]:
            path = Path(opts["output"])
            if not path.is_absolute():
                path = Path(settings.BASE_DIR) / path
            write_doc(path, results)
            self.stdout.write(f"table written to {path}")
