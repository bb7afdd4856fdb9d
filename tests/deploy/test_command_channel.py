"""A worker whose command subscription was cut silently subscribes again and hears the next command.

A real `manage.py worker` talks to a private redis-server through a TCP relay. The relay cuts the worker's
pub/sub connection the way a lost link does: Redis sees the client go (and forgets the subscription), the
worker sees nothing at all. Then rq's `shutdown` command is published for it, again and again.

Before (rq's own subscription, WORKER_COMMAND_CHECK_SECONDS=0 here): the worker keeps running and every PUBLISH
reaches 0 subscribers; it would never hear a stop-job command again. After: within a check or two it
subscribes again on a new connection and the shutdown lands.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import sys
import threading
import time

import pytest
import redis
from rq.command import send_shutdown_command

from ops.processes import Processes, wait_port

from ..conftest import child_settings, skip_or_fail, wait_for
from .stack import free_port

pytestmark = [pytest.mark.slow]


class Relay:
    """A TCP relay to Redis that can cut the pub/sub connections silently (the client side stays open and
    hears nothing; the Redis side is closed, as a server's keepalive would close it)."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.pairs: list[tuple[socket.socket, socket.socket, dict]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            state = {"pubsub": False, "cut": False}
            with self.lock:
                self.pairs.append((client, upstream, state))
            threading.Thread(target=self._pump, args=(client, upstream, state, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, state, False), daemon=True).start()

    def _pump(self, source, dest, state, from_client):
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            if not data or state["cut"]:
                if not state["cut"]:
                    for sock in (source, dest):
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_RDWR)
                return
            if from_client and b"SUBSCRIBE" in data.upper():
                state["pubsub"] = True
            with contextlib.suppress(OSError):
                dest.sendall(data)

    def cut_pubsub(self) -> int:
        cut = 0
        with self.lock:
            for _client, upstream, state in self.pairs:
                if state["pubsub"] and not state["cut"]:
                    state["cut"] = True  # nothing more reaches the worker on this socket, and nothing closes it
                    with contextlib.suppress(OSError):
                        upstream.shutdown(socket.SHUT_RDWR)
                    cut += 1
        return cut

    def close(self):
        self.server.close()
        with self.lock:
            for client, upstream, _ in self.pairs:
                for sock in (client, upstream):
                    with contextlib.suppress(OSError):
                        sock.close()


@pytest.fixture
def private_redis(tmp_path):
    binary = shutil.which("redis-server")
    if binary is None:
        skip_or_fail("redis-server is not installed (needed for a Redis whose connections the test may cut)")
    port = free_port()
    procs = Processes(log_dir=tmp_path)
    procs.start("redis", [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
    assert wait_port(port, 15), "redis-server did not listen"
    yield port
    procs.stop(grace=5)


def _run(workers, private_redis, check_seconds: str) -> tuple[bool, int]:
    """(whether the worker obeyed a shutdown after its command connection was cut, PUBLISH's last count)."""
    relay = Relay(private_redis)
    direct = redis.Redis(port=private_redis)
    name = f"cmd-{check_seconds.replace('.', '-')}-{time.monotonic_ns()}"
    worker = workers.procs.start("worker", [sys.executable, "manage.py", "worker", "--name", name], env={
        "REDIS_URL": f"redis://127.0.0.1:{relay.port}/0", **child_settings(WORKER_COMMAND_CHECK_SECONDS=float(check_seconds))})
    try:
        channel = f"rq:pubsub:{name}"
        wait_for(lambda: direct.pubsub_numsub(channel)[0][1] == 1, timeout=60,
                 message=lambda: f"the worker to subscribe\n{worker.tail()}")
        time.sleep(3)  # a few probes of a healthy channel: none of them may find it deaf
        assert "stopped delivering" not in worker.tail(), worker.tail()
        assert relay.cut_pubsub() == 1
        wait_for(lambda: direct.pubsub_numsub(channel)[0][1] == 0, timeout=10, message="Redis to drop the client")
        deadline = time.monotonic() + 12
        count = 0
        while time.monotonic() < deadline and worker.poll() is None:
            count = direct.publish(channel, '{"command": "noop"}')
            if count:
                send_shutdown_command(direct, name)
            time.sleep(0.5)
        with contextlib.suppress(Exception):
            worker.wait(timeout=15)
        return worker.poll() is not None, count
    finally:
        workers.procs.stop([worker], grace=5)
        relay.close()


def test_a_silently_cut_command_channel_is_rebuilt_and_the_shutdown_lands(workers, private_redis):
    obeyed, count = _run(workers, private_redis, "1")
    assert obeyed, f"the worker never heard the shutdown (last PUBLISH reached {count})\n{workers.logs()}"
    log = next(workers.log_dir.glob("worker-*.log")).read_text()
    # Redis forgets the cut subscriber at once or a moment later: a probe sent in between is lost instead
    reasons = ("Redis has no subscriber on it", "a probe did not come back within 1 s")
    assert any(f"the command channel stopped delivering ({why}); subscribing again" in log for why in reasons), log


def test_without_the_check_the_cut_channel_stays_deaf(workers, private_redis):
    """rq's own behaviour, kept for comparison: the check above is what makes the difference."""
    obeyed, count = _run(workers, private_redis, "0")
    assert not obeyed and count == 0, workers.logs()
