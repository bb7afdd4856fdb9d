"""A stop signal that lands between two jobs stops the worker before its next job.

Between jobs rq answers SIGINT/SIGTERM by raising `StopRequested` from the signal handler, at whatever line the
worker is on. `make run`'s Ctrl-C reaches a worker busy with a batch of quick items often right inside rq's log
call for the job it has just dequeued: the log handler swallows the exception ("--- Logging error ---"), the
worker goes on taking jobs, ignores `make run`'s SIGTERM that follows within a second (rq's duplicate-signal
rule) and is killed when the 10 s grace is over. Here the signal handler runs inside that log call, as it did;
the stop must hold all the same.
"""

from __future__ import annotations

import logging
import os
import signal

from rq.worker import WorkerStatus

from ticketagent import stopping
from ticketagent.scheduling.rqworker import SimpleWorker

DEQUEUED = "Worker %s: %s: %s (%s)"  # rq's log line for the job it has just dequeued (worker.log_job_description)


class SignalInsideLog(logging.Handler):
    """Runs the worker's stop handler inside the log call for a dequeued job, as the signal did, and
    swallows what it raises the way logging's own handlers do (`Handler.handleError`)."""

    def __init__(self, worker: SimpleWorker):
        super().__init__()
        self.worker, self.fired = worker, 0

    def emit(self, record):
        if self.fired or record.msg != DEQUEUED:
            return
        self.fired += 1
        try:
            assert self.worker.get_state() != WorkerStatus.BUSY  # rq's "not busy: raise" branch
            self.worker.request_stop(signal.SIGTERM, None)  # what the signal runs
        except Exception:  # noqa: BLE001 - what logging.StreamHandler.emit does with it
            pass


def test_a_stop_swallowed_between_jobs_still_ends_the_work_loop_before_the_next_job(queue):
    jobs = 3
    for _ in range(jobs):
        queue.enqueue(os.getpid)
    worker = SimpleWorker([queue], connection=queue.connection, name="stop-noted-test")
    worker.log_job_description = True
    handler = SignalInsideLog(worker)
    worker.log.addHandler(handler)
    level = worker.log.level
    worker.log.setLevel(logging.INFO)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        worker.work(burst=True, with_scheduler=False)
    finally:
        worker.log.removeHandler(handler)
        worker.log.setLevel(level)
        for sig, handler_before in saved.items():
            signal.signal(sig, handler_before)
        stopping._stopping.clear()  # the stop was this test's own: the process goes on as a test process
    assert handler.fired == 1
    # the job it had dequeued ran; the others wait for the next worker
    assert queue.count == jobs - 1
