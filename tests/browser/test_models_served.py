"""Which model served each model step, on the item page and the task page.

Before: the model was a label of the task, written when it was created: a task started on the local model and
finished after a restart on the offline rules still said "local model" everywhere, and an item's page could not
say which model had decided it; the JSONL export named items only by their database id."""

import json
from pathlib import Path

import pytest
from playwright.sync_api import expect

from ticketagent.llm.offline import OfflineModel
from ticketagent.pipeline.run import item_process

from ..factories import make_task
from .conftest import assert_accessible, assert_fits_the_screen, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]


class LocalModel(OfflineModel):
    """The offline rules under another name: the model a worker had before its restart."""

    label = "local model: SmolLM2-135M"


@pytest.mark.parametrize("width", [1400, 390])
def test_each_model_step_names_the_model_that_served_it(page, live_server, queue, sandbox, alice, width):
    task = make_task(2, name="Across a restart")
    before, after = task.items.order_by("row")
    assert item_process(item_id=before.pk, attempt=before.attempt, model=LocalModel()) == "done"
    assert item_process(item_id=after.pk, attempt=after.attempt, model=OfflineModel()) == "done"

    login(page, "alice", "alice-pass-123")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/tasks/{task.pk}/")
    expect(page.locator("#task-models")).to_have_text(
        "model steps by local model: SmolLM2-135M (3), offline model (3)")
    assert_fits_the_screen(page, "the task page")
    # the export names each item by its ticket (it named them by database id) and each model step by its model
    with page.expect_download() as download:
        page.get_by_role("link", name="export events (JSONL)").click()
    lines = [json.loads(line) for line in Path(download.value.path()).read_text().splitlines()]
    steps = [line for line in lines if line["type"] == "STEP_DONE" and "model" in line["payload"]]
    assert {(line["ticket"], line["payload"]["model"]) for line in steps} == {
        ("T-1", "local model: SmolLM2-135M"), ("T-2", "offline model")}

    page.goto(f"/items/{before.pk}/")
    decision = page.locator("#decision")
    for step in ("Triage", "Draft", "Actions"):
        expect(decision.locator("dt", has_text=step).locator(".served")).to_have_text("by local model: SmolLM2-135M")
    expect(page.locator("#history li[data-type=STEP_DONE]", has_text="triage")).to_contain_text(
        "by local model: SmolLM2-135M")
    assert_accessible(page, "the item page")
    page.goto(f"/items/{after.pk}/")
    expect(page.locator("#decision dt", has_text="Triage").locator(".served")).to_have_text("by offline model")
    assert page.console_errors == []
