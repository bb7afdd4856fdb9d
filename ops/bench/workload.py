"""The benchmark's workload tasks: their tickets, and when their items have ended."""

from __future__ import annotations

import time

from django.contrib.auth.models import Group, User
from django.db.models import Count, Max
from django.test import Client

from ledger.models import Effect
from ticketagent.models import Item, ItemStatus
from ticketagent.services.tasks import task_create


def ticket_dict(row) -> dict:
    return {"ticket_id": row.ticket_id, "customer_email": row.customer_email, "customer_name": row.customer_name,
            "subject": row.subject, "body": row.body, "priority": row.priority, "language": row.language}


def wait_task_ended(task_id: int, n: int, timeout: float) -> float:
    """Poll until every item of the task ended or waits for a person; returns
    the wall-clock time the last one changed (from the database)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        open_items = Item.objects.filter(task_id=task_id, status__in=(ItemStatus.QUEUED, ItemStatus.RUNNING)).count()
        if open_items == 0:
            last = Item.objects.filter(task_id=task_id).aggregate(last=Max("updated_at"))["last"]
            return last.timestamp()
        time.sleep(0.1)
    raise TimeoutError(f"task {task_id}: {n} items did not end within {timeout:.0f}s")


def task_outcome(task_id: int) -> dict:
    return dict(Item.objects.filter(task_id=task_id).values_list("status").annotate(n=Count("id")))


def operator_client() -> Client:
    """A Django test client logged in as the bench's operator (the pages, in-process)."""
    user, _ = User.objects.get_or_create(username="bench-operator")
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    client = Client()
    client.force_login(user)
    return client


def durable_rate(rows, w: int, invalid: list[str], *, label: str = "overhead") -> tuple[float, float]:
    """Items/s of the durable pipeline, and its effects per item; a run whose
    items did not all end done is noted in `invalid`."""
    n = len(rows)
    t0 = time.time()
    task = task_create(rows=rows, name=f"bench {label} {w}w", allow_auto_close=True, failure_threshold=n + 1)
    end = wait_task_ended(task.pk, n, timeout=60 + n * 2)
    outcome = task_outcome(task.pk)
    if outcome.get("done", 0) != n:
        invalid.append(f"{w} worker(s): durable items ended {outcome}")
    return n / (end - t0), Effect.objects.filter(owner_task=str(task.pk)).count() / n
