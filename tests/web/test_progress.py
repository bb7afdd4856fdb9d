"""Live progress: the fragment polls until the task is final, then says 286."""

import pytest
from django.urls import reverse

from ticketagent.models import Event, EventType, Task, TaskStatus
from ticketagent.web.selectors import task_models

from ..factories import make_task

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

HTMX = {"HX-Request": "true"}


def test_progress_fragment_polls_while_running_and_answers_286_once_final(client, bob):
    client.force_login(bob)
    task = make_task(2)
    url = reverse("task-progress", args=[task.pk])
    running = client.get(url, headers=HTMX)
    assert running.status_code == 200
    assert 'hx-trigger="every 2s"' in running.content.decode()
    assert "<html" not in running.content.decode()

    task.items.update(status="done")
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.COMPLETED)
    final = client.get(url, headers=HTMX)
    assert final.status_code == 286
    assert "100%" in final.content.decode()


def test_task_pages_render_for_a_viewer_without_action_buttons(client, bob):
    client.force_login(bob)
    task = make_task(2)
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.SUSPENDED, status_reason="3 consecutive failures: x")
    for name, args in [("tasks", []), ("task-detail", [task.pk]), ("review", []), ("effect-classes", []),
                       ("item-detail", [task.items.first().pk])]:
        response = client.get(reverse(name, args=args))
        assert response.status_code == 200, name
        assert b"Resume" not in response.content and b"Cancel</button>" not in response.content
    assert b"3 consecutive failures" in client.get(reverse("tasks")).content


def test_task_list_fragment(client, bob):
    client.force_login(bob)
    make_task(1)
    response = client.get(reverse("tasks"), headers=HTMX)
    assert response.status_code == 200
    assert response.content.decode().lstrip().startswith("<table")


@pytest.mark.django_db(transaction=True)
def test_a_completed_task_keeps_its_counts_and_the_dashboard_reads_them(client, bob, sandbox):
    """No item of a completed task moves again: its counts are written when it
    completes, and the task list and detail read them instead of counting."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from ticketagent.pipeline.run import item_process
    from ticketagent.web.selectors import task_progress, tasks_for_dashboard

    task = make_task(2)
    for item in task.items.all():
        assert item_process(item_id=item.pk, attempt=item.attempt) == "done"
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED and task.final_counts == {"done": 2}
    with CaptureQueriesContext(connection) as queries:
        [listed] = tasks_for_dashboard()
    assert "ticketagent_item" not in " ".join(q["sql"] for q in queries.captured_queries)
    assert (listed.progress.total, listed.progress.done, listed.progress.percent) == (2, 2, 100)
    assert task_progress(task).counts == {"done": 2}
    client.force_login(bob)
    assert "100%" in client.get(reverse("tasks")).content.decode()


def test_models_that_served_as_many_steps_are_named_in_the_order_they_first_served():
    """A tie in steps is broken by who served first, not by however PostgreSQL groups them."""
    task = make_task(1)
    models = [f"model {name}" for name in "qwertyuiop"]
    for model in models:
        Event.objects.create(task=task, type=EventType.STEP_DONE, payload={"model": model})
    Event.objects.create(task=task, type=EventType.STEP_DONE, payload={"model": "model y"})
    assert task_models(task) == [("model y", 2)] + [(m, 1) for m in models if m != "model y"]
