import csv
import io

from ticketagent.eventlog.replay import diff, replay, tables_state, task_events
from ticketagent.services.upload import task_upload

HEADER = ["ticket_id", "customer_email", "customer_name", "subject", "body", "priority"]


def csv_batch(n: int, *, prefix="T", subject="Refund for my last invoice", body="I was charged twice, please refund.",
              priority="normal") -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(HEADER)
    for i in range(1, n + 1):
        writer.writerow([f"{prefix}-{i}", f"cust{i}@example.com", f"Customer {i}", subject, body, priority])
    return out.getvalue().encode()


def make_task(n: int = 3, **kwargs):
    kwargs.setdefault("filename", "batch.csv")
    data = kwargs.pop("data", None) or csv_batch(n, **{k: kwargs.pop(k) for k in ("subject", "body", "priority", "prefix")
                                                       if k in kwargs})
    return task_upload(data=data, **kwargs)


def suspended_task(workers, sandbox, n: int, *, failure_threshold: int, failing_endpoint: str):
    """A task suspended by its helpdesk refusing one endpoint (422), run by a real burst worker."""
    from ticketagent.models import TaskStatus

    sandbox.set_faults(error_status=422, error_rate={failing_endpoint: 1.0})
    task = make_task(n, failure_threshold=failure_threshold)
    assert workers.burst() == 0, workers.logs()
    task.refresh_from_db()
    assert task.status == TaskStatus.SUSPENDED
    return task


def task_replay_diff(task_id: int) -> list[str]:
    """What the task's event log, replayed, says differently from its tables (`manage.py replay`)."""
    return diff(replay(task_events(task_id)), tables_state(task_id))
