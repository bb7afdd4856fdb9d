"""The benchmark's workload tasks: their tickets, and when their items have ended."""

from __future__ import annotations

import time

from django.contrib.auth.models import Group, User
from django.db.models import Count, Max
from django.test import Client

from ticketagent.models import Item, ItemStatus


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
