"""RQ workers whose command channel (stop-job, shutdown, kill-horse) is probed and rebuilt when it goes deaf.

rq listens for commands on a pub/sub connection in a thread of its own
(``Worker.subscribe``). That thread exits on any error but a ConnectionError
(a connect that times out raises TimeoutError: a Redis host that is
unreachable, not refused), and a link cut silently leaves it waiting on a
socket that will never deliver: either way the worker keeps taking jobs but
never hears a command again. Here a watchdog thread publishes a probe on the
worker's own channel every ``WORKER_COMMAND_CHECK_SECONDS``; when the probe
does not come back through the subscription within the check's timeout, it
closes the subscription and subscribes again on a new connection, one with
connect and read timeouts and TCP keepalives so a reconnect cannot hang.

rq's hooks: everything here overrides rq's public worker methods
(`subscribe`, `unsubscribe`, `handle_payload`, `register_birth`,
`register_death`, `handle_warm_shutdown_request`, `work`, `heartbeat`,
`set_state`, `dequeue_job_and_maintain_ttl`, `execute_job`, `teardown`,
`request_force_stop`, `handle_execution_ended`) and calls `perform_job` and
`prepare_execution` as rq does, but for one private method: `SimpleWorker._shutdown`. rq offers no
hook for a stop to take effect at once while jobs still run: its
`_shutdown` waits for a busy worker's job, and the in-process worker's main
thread is not the one running them (it would go on waiting for the next
job), so there the stop raises `StopRequested` in the main thread at once.
"""


from __future__ import annotations

import json
import os
import queue
import signal
import threading
import time
import uuid
from datetime import timedelta

import redis
from django.conf import settings
from rq.command import parse_payload
from rq.exceptions import StopRequested
from rq.suspension import is_suspended
from rq.timeouts import BaseDeathPenalty
from rq.utils import now
from rq.worker import SimpleWorker as RQSimpleWorker
from rq.worker import Worker as RQWorker
from rq.worker import WorkerStatus

from ticketagent.channels.served import helpdesk_known
from ticketagent.scheduling.sweep import sweep_while_held
from ticketagent.scheduling.worker_name import take_name
from ticketagent.stopping import process_stop

PROBE_COMMAND = "ticketagent-probe"  # rq's handle_command ignores commands it does not know


class CommandChannelWatchdog:
    """Mixin for an rq worker: subscribe with timeouts, probe the subscription, rebuild it when it is deaf."""

    def subscribe(self):
        self._watch_lock = threading.Lock()
        self._watch_stop = threading.Event()
        self._probe_seen = threading.Event()
        self._probe_token = ""
        self.resubscriptions = 0
        self._subscribe_with_timeouts()
        interval = settings.WORKER_COMMAND_CHECK_SECONDS
        if interval > 0:
            threading.Thread(target=self._watch, args=(interval,), name="command-channel-watchdog",
                             daemon=True).start()

    def unsubscribe(self):
        stop = getattr(self, "_watch_stop", None)
        if stop is not None:
            stop.set()
            with self._watch_lock:
                self._unsubscribe_once()
        else:
            self._unsubscribe_once()

    def _unsubscribe_once(self):
        # The listener thread closes its own PubSub when it stops; rq closes it
        # again after the join, and redis-py's second close() meets a
        # connection already gone: the worker is stopping, nothing is lost.
        try:
            super().unsubscribe()
        except AttributeError:
            self.log.debug("Worker %s: the command channel was already closed", self.name)

    def handle_payload(self, message):
        try:
            payload = parse_payload(message)
        except (ValueError, KeyError, AttributeError):
            self.log.warning("Worker %s: ignored a command that is not JSON", self.name)
            return
        if payload.get("command") == PROBE_COMMAND:
            if payload.get("token") == self._probe_token:
                self._probe_seen.set()
            return
        super().handle_payload(message)

    # -- the subscription ------------------------------------------------------
    def _command_client(self) -> redis.Redis:
        """A client on the worker's Redis whose sockets time out and keep alive (the queue's own
        connection blocks on BLMOVE for up to a minute, so it cannot carry a short read timeout)."""
        pool = self.connection.connection_pool
        timeout = _probe_timeout(settings.WORKER_COMMAND_CHECK_SECONDS)
        kwargs = {**pool.connection_kwargs, "socket_connect_timeout": timeout, "socket_timeout": timeout,
                  "socket_keepalive": True, "health_check_interval": 0}
        return redis.Redis(connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs))

    def _subscribe_with_timeouts(self) -> None:
        self.log.info("Worker %s: subscribing to channel %s", self.name, self.pubsub_channel_name)
        client = self._command_client()
        pubsub = client.pubsub()
        try:
            pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        except BaseException:
            pubsub.close()
            client.connection_pool.disconnect()
            raise
        self.pubsub = pubsub
        self.pubsub_thread = pubsub.run_in_thread(sleep_time=1, daemon=True,
                                                  exception_handler=self._pubsub_exception_handler)

    def _probe(self, client: redis.Redis, timeout: float) -> str:
        """Why a message published now on our channel does not reach our handler within `timeout` ("": it does)."""
        self._probe_seen.clear()
        self._probe_token = f"{time.monotonic_ns()}"
        payload = json.dumps({"command": PROBE_COMMAND, "token": self._probe_token})
        if not self.pubsub_thread.is_alive():
            return "its thread has exited"
        if client.publish(self.pubsub_channel_name, payload) < 1:
            return "Redis has no subscriber on it"
        return "" if self._probe_seen.wait(timeout) else f"a probe did not come back within {timeout:g} s"

    def _watch(self, interval: float) -> None:
        timeout = _probe_timeout(interval)
        client = self._command_client()
        while not self._watch_stop.wait(interval):
            try:
                reason = self._probe(client, timeout)
                if not reason:
                    continue
            except redis.RedisError as exc:
                self.log.warning("Worker %s: command channel probe failed: %s", self.name, exc)
                continue  # Redis itself is out of reach: the next probe tries again
            with self._watch_lock:
                if self._watch_stop.is_set():
                    return
                self.log.warning("Worker %s: the command channel stopped delivering (%s); subscribing again",
                                 self.name, reason)
                # the old thread sees the flag within a second and closes its own connection
                self.pubsub_thread.stop()
                try:
                    self._subscribe_with_timeouts()
                    self.resubscriptions += 1
                except redis.RedisError as exc:
                    self.log.warning("Worker %s: subscribing again failed: %s", self.name, exc)


def _probe_timeout(interval: float) -> float:
    return max(1.0, min(5.0, interval / 2))


# The worker's own sign of life in its rq hash: the Redis server's clock (seconds), so hosts' clocks do not matter.
# rq's own heartbeat comes between jobs (an idle worker's every WORKER_TTL - 15 s) and its key outlives a killed
# worker by minutes: the Workers page and /readyz would count the dead as alive.
# A worker whose registration was taken over under its name (`worker_name`: it was silent for a lease, e.g. paused)
# finds another incarnation there, or its own marked dead, and writes nothing: answer 0. (A hash rq wrote again
# after it expired, e.g. Redis flushed, carries no incarnation: it is still this worker's.)
_SAY_ALIVE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 1 end
local incarnation = redis.call('HGET', KEYS[1], 'incarnation')
if redis.call('HEXISTS', KEYS[1], 'death') == 1 or (incarnation and incarnation ~= ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'seen', redis.call('TIME')[1], 'incarnation', ARGV[2])
if redis.call('TTL', KEYS[1]) < tonumber(ARGV[1]) then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return 1
"""
_LAST_SEEN = """
local now = tonumber(redis.call('TIME')[1])
local out = {}
for i, key in ipairs(KEYS) do
  local seen = redis.call('HGET', key, 'seen')
  if seen then out[i] = tostring(now - tonumber(seen)) else out[i] = '' end
end
return out
"""


def seconds_since_seen(connection: redis.Redis, keys: list[str]) -> list[float | None]:
    """For each worker key, seconds since its process last said it was alive (None: a worker that never says so)."""
    if not keys:
        return []
    answers = connection.eval(_LAST_SEEN, len(keys), *keys)
    return [float(a) if a not in (b"", "") else None for a in answers]


def is_alive(seconds_since: float | None) -> bool:
    """Alive: heard from within one lease time (a worker silent that long has lost every lease it held)."""
    return seconds_since is None or seconds_since <= settings.LEASE_SECONDS


class SignOfLife:
    """Mixin for an rq worker: its kind at birth and, every HEARTBEAT_SECONDS from a thread of its own, the time
    it was last seen alive (a killed or paused process stops saying so; the key still expires as rq's does).

    Its name is taken over from a predecessor dead by the lease rule, and waited for while one is alive
    (`worker_name.take_name`). A worker that finds its own registration taken over (it was paused for longer
    than a lease, and its items are taken over too) stops as if sent SIGTERM, and leaves the registration to
    the worker that holds it now."""

    kind = "unknown"

    def register_birth(self):
        take_name(self)
        self._incarnation = uuid.uuid4().hex
        self._taken_over = False
        super().register_birth()
        self.connection.hset(self.key, mapping={"kind": self.kind, "incarnation": self._incarnation})
        served = helpdesk_known()
        if served is not None:  # the Workers page says which helpdesk it serves
            self.connection.hset(self.key, mapping={"helpdesk": served.id, "helpdesk_label": served.label})
        self._alive_stop = threading.Event()
        self._say_alive_once()
        threading.Thread(target=self._say_alive, name="sign-of-life", daemon=True).start()

    def register_death(self):
        if hasattr(self, "_alive_stop"):
            self._alive_stop.set()
        if getattr(self, "_taken_over", False):
            return  # the name's registration is another worker's now
        super().register_death()

    def _say_alive_once(self) -> None:
        if self.connection.eval(_SAY_ALIVE, 1, self.key, int(self.worker_ttl) + 60, self._incarnation):
            return
        if self._alive_stop.is_set() or self._taken_over:
            return
        self._taken_over = True
        self.log.error("Worker %s: another worker took this name over (this one was silent for longer than a "
                       "lease; its items are taken over as well); stopping", self.name)
        os.kill(os.getpid(), signal.SIGTERM)

    def _say_alive(self) -> None:
        while not self._alive_stop.wait(settings.HEARTBEAT_SECONDS):
            try:
                self._say_alive_once()
            except Exception as exc:  # noqa: BLE001 - Redis away: said again on the next beat
                self.log.debug("Worker %s: sign of life not written: %s", self.name, exc)


class StopNoted:
    """Mixin for an rq worker: a stop signal is noted before rq acts on it.

    Between jobs rq answers SIGINT/SIGTERM by raising `StopRequested` from the
    signal handler, wherever the worker happens to be. Raised inside a log call
    (rq logs each job it dequeues) or any other `except Exception`, it is
    swallowed: the worker goes on taking jobs, ignores the second signal that
    follows within a second (`request_force_stop`), and is killed when its
    supervisor's grace runs out (`make run`, systemd). Noted first, the stop
    holds either way: the work loop ends before its next job."""

    def handle_warm_shutdown_request(self):
        self._stop_requested = True
        process_stop()  # items in flight hand themselves back before their next model call
        super().handle_warm_shutdown_request()


# `manage.py worker` says whether this process takes its turn at the sweep (not in a burst, nor with --no-sweep)
SWEEPS = [True]


class Sweeps:
    """Mixin for an rq worker: from its birth to its death, a thread of its own takes its turn at the recovery
    sweep (`ticketagent.scheduling.sweep`)."""

    def register_birth(self):
        super().register_birth()
        self._sweep_stop = threading.Event()
        if SWEEPS[0]:
            self._sweep_thread = threading.Thread(target=sweep_while_held, args=(self._sweep_stop,), name="sweep",
                                                  daemon=True)
            self._sweep_thread.start()

    def register_death(self):
        if hasattr(self, "_sweep_stop"):
            self._sweep_stop.set()  # its session closes and the lock goes with it: another worker takes it
            if hasattr(self, "_sweep_thread"):
                self._sweep_thread.join(timeout=settings.DB_STATEMENT_TIMEOUT_SECONDS)
        super().register_death()


class Worker(Sweeps, SignOfLife, StopNoted, CommandChannelWatchdog, RQWorker):
    """rq's forking worker (WORKER_FORK=true) with a checked command channel."""

    kind = "forking"
    log_result_lifespan = False  # rq's "result is kept for 3600 seconds", after every job, says nothing


class NoDeathPenalty(BaseDeathPenalty):
    """No timer around a job run in a thread (SIGALRM reaches only the main thread): an item's time is bounded by
    its lease and its calls' own timeouts."""

    def setup_death_penalty(self):
        pass

    def cancel_death_penalty(self):
        pass


class SimpleWorker(Sweeps, SignOfLife, StopNoted, CommandChannelWatchdog, RQSimpleWorker):
    """rq's in-process worker (the default), running up to WORKER_THREADS jobs at once, with a checked command
    channel.

    A model call is waiting, not work: one process can hold many items in
    flight. A thread that finishes a job takes the next waiting one itself
    (`_take_next`); one that finds the queue empty goes idle, and the main
    thread, which dequeues only while a thread is idle, hands it the next
    job that comes (each thread has its own database connection, kept
    between jobs); every job is still one item,
    under its own lease (one heartbeat thread renews them all:
    `pipeline.lease.HEARTBEATS`). A stop (SIGTERM) takes no job more and
    waits for the items in flight to finish; a second one, or a SIGKILL,
    ends them all at once, and each is taken over when its lease expires,
    as for a worker that held one. In burst mode the worker quits once the
    queue is empty and no thread is busy (an item in flight may enqueue more:
    its task's window)."""

    death_penalty_class = NoDeathPenalty
    kind = "in-process"
    log_result_lifespan = False

    def work(self, burst: bool = False, **kwargs):
        self.threads = settings.WORKER_THREADS
        self._handed: queue.SimpleQueue = queue.SimpleQueue()
        self._busy = 0
        self._changed = threading.Condition()
        self._burst = burst
        for number in range(self.threads):
            threading.Thread(target=self._thread_loop, name=f"item-thread-{number}", daemon=True).start()
        return super().work(burst=burst, **kwargs)

    def register_birth(self):
        super().register_birth()
        self.connection.hset(self.key, "threads", self.threads)  # the Workers page shows those busy

    # rq heartbeats the worker before and after each dequeue and after each hand-over, three round trips each,
    # in the main thread, whose turn for the interpreter a hand-over waits for when many items are in flight; the
    # key's lifetime is also extended as each job starts (in rq's pipeline) and by the sign of life, so here once
    # every RQ_HEARTBEAT_SECONDS, in one round trip.
    RQ_HEARTBEAT_SECONDS = 10.0

    def heartbeat(self, timeout=None, pipeline=None):
        if pipeline is not None:
            return super().heartbeat(timeout, pipeline)
        if time.monotonic() - getattr(self, "_heartbeat_at", -1e9) < self.RQ_HEARTBEAT_SECONDS:
            return None
        self._heartbeat_at = time.monotonic()
        with self.connection.pipeline() as pipe:
            super().heartbeat(timeout, pipe)
            pipe.execute()
        return None

    def set_state(self, state, pipeline=None):
        """rq marks the worker idle before each dequeue: not while its threads still run items."""
        if pipeline is None and state == WorkerStatus.IDLE and getattr(self, "_busy", 0):
            return
        super().set_state(state, pipeline)

    def _wait_until(self, ready) -> None:
        """Wait (heartbeating the worker) until `ready()` holds for the threads."""
        while True:
            with self._changed:
                if ready() or self._changed.wait_for(ready, timeout=5):
                    return
            self.heartbeat()

    def _held(self) -> int:
        """Jobs this process holds: running in a thread, or handed over and about to."""
        return self._busy + self._handed.qsize()

    def dequeue_job_and_maintain_ttl(self, timeout, max_idle_time=None):
        while True:
            self._wait_until(lambda: self._held() < self.threads)
            held_before = self._held()
            result = super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
            if result is not None or not self._burst or held_before == 0:
                return result
            # burst, the queue empty: the items in flight may still enqueue more (their task's window); ask again
            # when one ends, or after a moment (a thread that ends one may take the next itself: none ends)
            with self._changed:
                self._changed.wait_for(lambda before=held_before: self._held() < before, timeout=0.5)

    def execute_job(self, job, queue):
        # one call: a stop signal (raised in this, the main thread) cannot fall between a count and the hand-over
        self._handed.put((job, queue))
        with self._changed:
            self._changed.notify_all()

    def _thread_loop(self) -> None:
        while True:
            with self._changed:  # taken and counted at once: the main thread never sees a thread free too soon
                while self._handed.empty():
                    self._changed.wait(timeout=1)
                job, job_queue = self._handed.get_nowait()
                self._busy += 1
            try:
                while job is not None:
                    self._perform(job, job_queue)
                    job, job_queue = self._take_next() or (None, None)
            finally:
                with self._changed:
                    self._busy -= 1
                    if self._held() == 0:
                        self._say_idle()
                    self._changed.notify_all()

    def _say_idle(self) -> None:
        """The last busy thread ended: the worker is idle (rq says so only before its main thread's next dequeue,
        which may be waiting for a job already). Under `_changed`: a job handed over after this is marked busy
        after it."""
        try:
            self.set_state(WorkerStatus.IDLE)
        except redis.RedisError as exc:
            self.log.warning("Worker %s: could not mark itself idle (%s)", self.name, exc)

    def _perform(self, job, job_queue) -> None:
        try:
            self.perform_job(job, job_queue, self.prepare_execution(job))
        except Exception:  # noqa: BLE001 - perform_job records a job's own failure; this is rq's bookkeeping
            self.log.exception("Worker %s: job %s: the thread's bookkeeping failed", self.name, job.id)

    def _take_next(self):
        """A thread that finished a job takes the next one itself when one is waiting (without blocking), still
        counted busy: it does not wait for the main thread's turn for the interpreter, a few round trips that
        every hand-over needs and that, with many items in flight, queue behind all of them. None (the queue is
        empty, the worker stops or rq's workers are suspended): the thread goes back to the main thread's
        hand-overs."""
        if self._stop_requested:
            return None
        try:
            if self._suspended():
                return None
            taken = self.queue_class.dequeue_any(self._ordered_queues, None, connection=self.connection,
                                                 job_class=self.job_class, serializer=self.serializer,
                                                 death_penalty_class=self.death_penalty_class)
        except redis.RedisError as exc:
            self.log.warning("Worker %s: could not take the next job (%s); the main thread takes it", self.name, exc)
            return None
        if taken is not None:
            job, queue = taken
            job.redis_server_version = self.get_redis_server_version()
            self.log.info("Worker %s: %s: %s", self.name, queue.name, job.id)
        return taken

    SUSPENSION_CHECK_SECONDS = 1.0

    def _suspended(self) -> bool:
        """Whether rq's workers are suspended (`rq suspend`), asked of Redis at most once a second: a round trip
        every item otherwise, where a suspension takes effect within a second all the same."""
        checked = getattr(self, "_suspension", None)
        if checked is None or time.monotonic() - checked[0] >= self.SUSPENSION_CHECK_SECONDS:
            checked = self._suspension = (time.monotonic(), bool(is_suspended(self.connection, self)))
        return checked[1]

    def handle_execution_ended(self, job, queue, heartbeat_ttl):
        """rq also heartbeats the job here (a round trip), to give its success callback time: ours have none, and
        the job leaves the started registry in the next round trip."""
        job.ended_at = now()

    def _shutdown(self):
        """A stop takes effect at once in the main thread, busy threads or not: no job more is taken (noted,
        and the items in flight told, by `StopNoted`; rq has no public hook for this part, see the module's
        docstring)."""
        self.set_shutdown_requested_date()
        raise StopRequested()

    def request_force_stop(self, signum, frame):
        """A second stop: the process ends now, its items in flight left to their leases (as after a kill)."""
        if (now() - self._shutdown_requested_date) < timedelta(seconds=1):
            return
        self.log.warning("Worker %s: cold shut down; %d item(s) in flight are taken over when their leases expire",
                         self.name, self._busy)
        os._exit(1)

    def teardown(self):
        if hasattr(self, "_changed"):
            self._wait_until(lambda: self._held() == 0)  # a warm stop finishes what the threads hold
        super().teardown()
