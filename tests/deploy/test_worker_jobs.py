"""What the in-process worker does around each job: the lines it logs, the suspension its item threads heed.

A worker with a hundred items in flight logs a job's start and its end, a line each: rq's second line for a
success ("Job OK") is dropped, and httpx's line for each model call is logged only at LOG_LEVEL=DEBUG (each call
is in the event log). The item threads ask Redis whether rq's workers are suspended at most once a second.
"""

from __future__ import annotations

import logging
import os
import time

from django.conf import settings
from rq.job import JobStatus
from rq.suspension import resume, suspend

from ticketagent.scheduling.rqworker import SimpleWorker


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_a_job_that_succeeds_is_logged_once_at_its_start_and_once_at_its_end(queue):
    job = queue.enqueue(os.getpid)
    worker = SimpleWorker([queue], connection=queue.connection, name="job-lines-test")
    lines = Lines()
    log = logging.getLogger("rq.worker")
    log.addHandler(lines)
    try:
        worker.work(burst=True, with_scheduler=False)
    finally:
        log.removeHandler(lines)
    about_the_job = [line for line in lines.lines if job.id in line or job.description in line]
    assert len(about_the_job) == 2, lines.lines
    assert about_the_job[0].endswith(f"({job.id})")  # rq's line for the job it has just dequeued
    assert about_the_job[1].startswith(f"Successfully completed {job.description} job in ")
    assert not any("Job OK" in line for line in lines.lines)
    # the job ended as rq ends one (its heartbeat at the end is skipped: it has no success callback)
    job.refresh()
    assert job.get_status() == JobStatus.FINISHED and job.ended_at is not None
    assert job.id not in queue.started_job_registry.get_job_ids()


def test_model_calls_are_not_logged_a_line_each_unless_debugging():
    assert settings.LOGGING["loggers"]["httpx2"]["level"] == "WARNING"
    assert not logging.getLogger("httpx2").isEnabledFor(logging.INFO)
    assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)


def test_a_suspension_reaches_the_item_threads_within_a_second(queue):
    for _ in range(2):
        queue.enqueue(os.getpid)
    worker = SimpleWorker([queue], connection=queue.connection, name="suspension-test")
    assert worker._take_next() is not None  # not suspended: read from Redis, and kept for a second
    suspend(queue.connection)
    try:
        time.sleep(SimpleWorker.SUSPENSION_CHECK_SECONDS)
        assert worker._take_next() is None
    finally:
        resume(queue.connection)
    assert queue.count == 1  # the second job waits for a worker that is not suspended
