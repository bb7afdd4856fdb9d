"""One upload through the upload page in a fresh web process, measured from inside (`python -m ops.bench.upload_web`).

    python -m ops.bench.upload_web --rows 10000

A process of its own, so its memory is the web process's alone: Django set
up, an operator logged in, the page rendered once (templates, caches), the
CSV built; then the RSS before, and the file POSTed to `/upload/` with
Django's test client (the view, the form, `task_upload`: parsing,
validation, `task_create`, the jobs enqueued after commit), the RSS sampled
every 10 ms meanwhile. Redis round trips and commands are counted on the
client side (every packed send is a round trip; a pipeline sends its
commands in one), and the server's `INFO commandstats` is read before and
after (server-wide: other clients of that Redis count there too). Prints
one JSON line with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time


class RssPeak(threading.Thread):
    def __init__(self, interval: float = 0.01):
        super().__init__(daemon=True)
        import psutil

        self.proc = psutil.Process()
        self.interval = interval
        self.peak = self.proc.memory_info().rss
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.wait(self.interval):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def stop(self) -> int:
        self.stopped.set()
        self.join(timeout=2)
        return max(self.peak, self.proc.memory_info().rss)


def csv_bytes(n: int, tag: str) -> bytes:
    lines = ["ticket_id,customer_email,customer_name,subject,body"]
    for i in range(1, n + 1):
        lines.append(f"{tag}-{i},{tag.lower()}-{i}@example.com,Customer {i},Refund for invoice {i},"
                     f"I was charged twice for invoice {i}. Please refund one payment.")
    return ("\n".join(lines) + "\n").encode()


def server_commands(conn) -> int:
    return sum(int(v.get("calls", 0)) for v in conn.info("commandstats").values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--tag", default="U")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketagent.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth.models import Group, User
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.test import Client, override_settings

    from ops.bench.redis_counter import RedisCounter
    from ticketagent.scheduling import jobs

    if "testserver" not in settings.ALLOWED_HOSTS:  # the test client's host name
        override_settings(ALLOWED_HOSTS=[*settings.ALLOWED_HOSTS, "testserver"]).enable()
    user, _ = User.objects.get_or_create(username="bench-uploader")
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    client = Client()
    client.force_login(user)
    if client.get("/upload/", secure=True).status_code != 200:
        raise SystemExit("GET /upload/ did not answer 200")
    data = csv_bytes(args.rows, args.tag)
    redis_conn = jobs.get_queue().connection
    server_before = server_commands(redis_conn)
    counter = RedisCounter()
    sampler = RssPeak()
    rss_before = sampler.peak
    sampler.start()
    t = time.perf_counter()
    response = client.post("/upload/", {"file": SimpleUploadedFile(f"{args.tag}.csv", data, "text/csv"),
                                        "name": f"bench upload {args.rows}", "notify_channel": "helpdesk",
                                        "failure_threshold": 3}, secure=True)
    seconds = time.perf_counter() - t
    peak = sampler.stop()
    trips, commands = counter.round_trips, counter.commands
    server_after = server_commands(redis_conn)
    location = response.headers.get("Location") or response.headers.get("HX-Redirect") or ""
    sys.stdout.write(json.dumps({
        "rows": args.rows, "bytes": len(data), "status": response.status_code, "location": location,
        "seconds": seconds, "rss_before": rss_before, "rss_peak": peak, "redis_round_trips": trips,
        "redis_commands": commands, "server_commands": server_after - server_before - 1,
    }) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
