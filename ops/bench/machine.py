"""The machine a benchmark ran on: CPU, memory, versions, load and the speed of one core."""

from __future__ import annotations

import contextlib
import os
import platform
import time
from pathlib import Path

import psutil
from django.conf import settings
from django.db import connection
from django.utils import timezone


def cpu_probe() -> str:
    """Seconds a plain Python loop of 10M steps takes: the speed of one core,
    which on a shared VM can drift during a run (absolute figures drift with it)."""
    t = time.perf_counter()
    n = 0
    for i in range(10_000_000):
        n += i
    return f"{time.perf_counter() - t:.2f} s"


def load_average() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def machine_info() -> dict:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    info = {
        "date": timezone.now().strftime("%Y-%m-%d %H:%M UTC"),
        "CPU": cpu,
        "cores": str(os.cpu_count()),
        "RAM": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
        "OS": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
    }
    with connection.cursor() as cur:
        cur.execute("SHOW server_version")
        version = cur.fetchone()[0]
        cur.execute("SHOW fsync")
        fsync = cur.fetchone()[0]
        cur.execute("SHOW synchronous_commit")
        sync = cur.fetchone()[0]
        info["PostgreSQL"] = f"{version} (fsync {fsync}, synchronous_commit {sync})"
    try:
        import redis

        info["Redis"] = redis.Redis.from_url(settings.REDIS_URL).info("server")["redis_version"]
    except Exception as exc:  # noqa: BLE001 - the machine block is informative only
        info["Redis"] = f"unknown ({type(exc).__name__})"
    info["database"] = redacted_db()
    info["load average at start"] = load_average()
    info["one core, 10M-step Python loop, at start"] = cpu_probe()
    return info


def redacted_db() -> str:
    db = connection.settings_dict
    return f"postgresql {db.get('HOST') or 'localhost'}:{db.get('PORT') or ''}/{db['NAME']}"
