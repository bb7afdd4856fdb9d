"""The item page names the rule that decided: the category, the priority, the status and the escalation queue,
with what the model had said, and the facts read from the message (those not found say so).

Before: the page listed the rules that forbade, required or held actions only; a priority, status or queue a
rule decided was shown as if the model had chosen it.
"""

import pytest
import yaml
from playwright.sync_api import expect

from ticketagent.models import Item
from ticketagent.pipeline.run import item_process
from ticketagent.playbooks.services import playbook_import, version_publish
from ticketagent.services.upload import task_upload

from ..agent import kestrel
from .conftest import assert_accessible, assert_fits_the_screen, assert_keyboard_reaches_every_action, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("width", [390, 1280])
def test_the_item_page_names_the_deciding_rules(page, live_server, queue, settings, alice, width):
    settings.OPENAI_API_KEY = ""  # the offline model
    version = version_publish(version_id=playbook_import(
        data=yaml.safe_load(kestrel.PLAYBOOK.read_text(encoding="utf-8"))).pk)
    rows = kestrel.REHEARSAL.read_text(encoding="utf-8").split("\nKC-")
    data = (rows[0] + "\nKC-" + next(r for r in rows if r.startswith("1029,"))).encode()  # the header and KC-1029
    task = task_upload(data=data, filename="kc-1029.csv", rehearsal=True, playbook_version=version)
    item = task.items.get()
    item_process(item_id=item.pk, attempt=item.attempt)
    item = Item.objects.get(pk=item.pk)
    page.set_viewport_size({"width": width, "height": 900})
    login(page, "alice", "alice-pass-123")
    page.goto(f"/items/{item.pk}/")
    decision = page.locator("#decision")
    expect(decision.locator("[data-decided=priority]")).to_have_text(
        "by rule \u201cRule 10: safety is always urgent\u201d")
    expect(page.locator("#d-priority")).to_have_text("urgent priority")  # the form said low, the text "no rush"
    expect(decision.locator("[data-decided=category]")).to_contain_text("Rule 4: safety words")
    expect(page.locator("#d-status")).to_contain_text("escalated")
    expect(decision.locator("[data-decided=status]")).to_contain_text("Rule 17")
    expect(page.locator("#d-escalation")).to_contain_text("rt queue safety-team")
    expect(decision.locator("[data-decided=escalation]")).to_contain_text("Rule 21")
    expect(page.locator("#d-facts")).to_contain_text("bikes requested not found")
    expect(page.locator("#d-rules")).to_contain_text("Rule 14: exactly one of set_status and close_ticket")
    expect(page.locator("#d-actions")).not_to_contain_text("close_ticket")  # "Close this ticket now" changed nothing
    assert_fits_the_screen(page, f"item at {width}")
    assert_accessible(page, f"item at {width}")
    assert_keyboard_reaches_every_action(page, f"item at {width}")
