"""Throughput, ETA and time, as an operator reads them.

Before: "269.2 items/min · ETA 4 s" at 36% of a batch that had run for 37 s
(a burst of quick failures set the rate, and time spent waiting counted);
time was written four ways: no zone on the task list, time without date in
the timeline, "UTC" on the tiles, ages on Review."""

import datetime as dt
import json
import re
from types import SimpleNamespace

import pytest
from django.db import connection
from django.utils import timezone
from playwright.sync_api import expect

from ticketagent.models import Event, EventType, Item, ItemStatus, Task, TaskStatus

from ..factories import make_task
from .conftest import assert_accessible, assert_fits_the_screen, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def test_throughput_counts_running_time_and_the_eta_is_not_a_burst(page, live_server, queue, alice, monkeypatch):
    task = make_task(60, name="Burst then slow")
    now = timezone.now()
    # the pages read the clock once a render; held at `now`, a loaded machine's slow render changes nothing (the
    # rate and the ETA were read against the wall clock, and failed when the page came 20 s late)
    monkeypatch.setattr("ticketagent.web.selectors.timezone", SimpleNamespace(now=lambda: now))
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.RUNNING, started_at=now - dt.timedelta(seconds=37))
    burst = list(task.items.order_by("row").values_list("pk", flat=True)[:21])  # 36%: 21 items ended in 5 s
    for n, pk in enumerate(burst):
        Item.objects.filter(pk=pk).update(status=ItemStatus.FAILED,
                                          finished_at=now - dt.timedelta(seconds=37) + dt.timedelta(seconds=n / 4))
    login(page, "alice", "alice-pass-123")
    page.goto(f"/tasks/{task.pk}/")
    expect(page.locator("#percent")).to_have_text("35%")
    rate = float(page.locator("#progress .rate").inner_text().split()[0])
    assert 30 <= rate <= 36, f"21 items in 37 s of running is about 34 a minute, not {rate}"
    eta = page.locator("#progress .eta").inner_text()
    # 39 items at ~34/min: about 70 s, shown as the range 21 items can support, not "4 s"
    assert re.fullmatch(r"ETA [45]\d s – 2 min", eta), eta
    page.goto("/")
    expect(page.locator(f"#task-{task.pk} .eta")).to_have_text(re.compile(r"^ETA [45]\d s – 2 min$"))


@pytest.mark.parametrize("width", [1400, 390])
def test_suspended_time_is_not_running_time_and_an_eta_without_grounds_is_a_dash(page, live_server, queue, alice,
                                                                                 width, monkeypatch):
    """Before: "1.0 items/min overall" for a task that ran 4 s and sat suspended 20 minutes, and "ETA 2 s" from
    two items that ended within a second of a status change."""
    now = timezone.now()
    # the clock held at `now`, as above: on the wall clock "just started" would have run 10 s, long enough for a
    # rate, by the time a loaded machine had logged in and rendered two pages
    monkeypatch.setattr("ticketagent.web.selectors.timezone", SimpleNamespace(now=lambda: now))
    task = make_task(21, name="Ran 4 s, suspended 20 min")
    start = now - dt.timedelta(seconds=1205)
    Item.objects.filter(task=task).update(status=ItemStatus.DONE, finished_at=start + dt.timedelta(seconds=4))
    _event(task, EventType.SUSPENDED, {}, start + dt.timedelta(seconds=4))
    _event(task, EventType.RESUMED, {}, start + dt.timedelta(seconds=1204))
    _event(task, EventType.TASK_STATUS, {"status": "completed", "counts": {"done": 21}}, start + dt.timedelta(seconds=1205))
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.COMPLETED, started_at=start, finished_at=now,
                                           final_counts={"done": 21})
    just = make_task(10, name="Just started")
    Task.objects.filter(pk=just.pk).update(status=TaskStatus.RUNNING, started_at=now - dt.timedelta(seconds=3))
    Item.objects.filter(pk__in=list(just.items.values_list("pk", flat=True)[:2])).update(
        status=ItemStatus.DONE, finished_at=now - dt.timedelta(seconds=1))

    login(page, "alice", "alice-pass-123")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/")
    # 21 items over 5 s of running: 252 a minute, not 21 over 20 minutes
    ran = "252.0 items/min over its 5 s of running (20 min from start to end)"  # says its window, beside the clock
    expect(page.locator(f"#task-{task.pk}")).to_contain_text(ran)
    expect(page.locator(f"#task-{just.pk} .eta")).to_have_text("ETA —")
    assert_accessible(page, "the task list")
    page.goto(f"/tasks/{task.pk}/")
    expect(page.locator("#progress .rate")).to_have_text(ran)
    expect(page.locator("#progress .eta")).to_have_count(0)  # ended: no ETA
    page.goto(f"/tasks/{just.pk}/")
    expect(page.locator("#progress .eta")).to_have_text("ETA —")
    expect(page.locator("#progress .rate")).to_have_count(0)  # 3 s of running: too short to tell a rate
    assert_accessible(page, "a task just started")
    assert_fits_the_screen(page, "a task just started")


def _event(task, kind: str, payload: dict, when) -> None:
    """An event as it was recorded at `when` (the log is append-only and stamps its own time)."""
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {Event._meta.db_table} (task_id, type, payload, actor, timestamp) "
                       "VALUES (%s, %s, %s, '', %s)", [task.pk, kind, json.dumps(payload), when])


def test_one_way_to_write_time(page, live_server, operator_world, alice, client):
    login(page, "alice", "alice-pass-123")
    world = operator_world
    for url in ("/", f"/tasks/{world['suspended'].pk}/", "/review/", f"/items/{world['effect'].owner_item}/",
                "/search/?q=cust1@example.com"):
        page.goto(url)
        times = page.locator("main time")
        assert times.count() > 0, url
        for i in range(times.count()):
            t = times.nth(i)
            assert TIME.match(t.inner_text()), (url, t.inner_text())
            assert ISO_UTC.match(t.get_attribute("datetime")), (url, t.get_attribute("datetime"))
            assert "UTC" in t.get_attribute("title") and t.get_attribute("title").endswith("Z"), url
    page.goto("/review/")
    expect(page.locator("main")).not_to_contain_text(" ago")
    page.goto("/")
    expect(page.locator("#tile-unknown")).to_contain_text("oldest unknown:")  # an age where age is the point

    client.force_login(alice)
    response = client.get(f"/tasks/{world['suspended'].pk}/events.jsonl")
    lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert lines and all(ISO_UTC.match(line["timestamp"]) for line in lines)
