"""Throughput, ETA and time, as an operator reads them.

Before: "269.2 items/min · ETA 4 s" at 36% of a batch that had run for 37 s
(a burst of quick failures set the rate, and time spent waiting counted);
time was written four ways: no zone on the task list, time without date in
the timeline, "UTC" on the tiles, ages on Review."""

import datetime as dt
import json
import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from ticketagent.models import Item, ItemStatus, Task, TaskStatus

from ..factories import make_task
from .conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def test_throughput_counts_running_time_and_the_eta_is_not_a_burst(page, live_server, queue, alice):
    task = make_task(60, name="Burst then slow")
    now = timezone.now()
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
    assert re.fullmatch(r"ETA 1 min \d+ s", eta), eta  # 39 items at ~34/min, not "4 s"


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
