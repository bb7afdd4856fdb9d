"""What a worker's log says about each job: the job's start and its end, one line each.

rq ends every successful job with two lines, "Successfully completed … in 1.2s" and then "Job OK"; the second
says nothing the first did not. With a hundred items in flight every line is also a turn at the log handler's
lock (logging.Handler.acquire), which the item threads wait for in line.
"""

import logging

JOB_OK_FORMAT = "Worker %s: %s: %s (%s)"  # rq's line after a job's success, and after a dequeue


class JobOkOnce(logging.Filter):
    """On rq's worker logger: drops its "Job OK" line (the "Successfully completed" line just before it stays)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == JOB_OK_FORMAT and len(record.args) == 4 and "Job OK" in str(record.args[2]))
