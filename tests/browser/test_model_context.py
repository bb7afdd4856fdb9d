"""The model's context in the browser, at phone and desktop width: publishing a playbook whose prompts cannot fit
the local model's 2,048 tokens says so with the numbers, and an item the model refused shows the server's reason.

Against the fake server as llama-server with that context (tests/fakes/openai_server.py). Before: publishing
took any version, and the item page said only "the model API rejected the request (HTTP 400)"."""

import pytest
from django.contrib.auth.models import Group, User
from playwright.sync_api import expect

from ticketagent.pipeline.run import item_process
from ticketagent.playbooks.models import PlaybookVersion
from ticketagent.playbooks.services import playbook_import

from ..agent import kestrel
from ..conftest import skip_or_fail
from ..factories import make_task
from .conftest import assert_accessible, assert_fits_the_screen, assert_keyboard_reaches_every_action, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WIDTHS = [1280, 390]


@pytest.fixture
def erin(transactional_db):
    """An editor."""
    user = User.objects.create_user("erin", password="erin-pass-123")
    user.groups.add(Group.objects.get_or_create(name="editors")[0])
    return user


@pytest.mark.parametrize("width", WIDTHS)
def test_publishing_a_playbook_that_cannot_fit_the_local_model_says_why_with_the_numbers(page, live_server,
                                                                                          openai_server, erin, width):
    if kestrel.present():
        skip_or_fail(kestrel.present())
    openai_server.configure(n_ctx=2048)
    policy = (kestrel.KESTREL / "policy.md").read_text(encoding="utf-8")
    data = kestrel.spec().model_dump(mode="json")
    data["guidance"]["policies"], data["guidance"]["escalation"] = policy[:4000], policy[4000:8000]
    draft = playbook_import(data=data)

    login(page, "erin", "erin-pass-123")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/playbooks/versions/{draft.pk}/")
    button = page.locator("#publish-button")
    button.focus()
    expect(button).to_be_focused()
    button.press("Enter")
    page.wait_for_url(f"**/playbooks/versions/{draft.pk}/publish/")
    error = page.locator("#publish-errors")
    expect(error).to_contain_text("v1 cannot be published: 1 reason")
    expect(error).to_contain_text("its prompts do not fit the model: the decide step needs ")
    expect(error).to_contain_text(" tokens, the local model holds 2,048 (512 kept for the answer")
    expect(page.locator("#confirm-publish")).to_have_count(0)
    assert PlaybookVersion.objects.get(pk=draft.pk).is_draft
    assert_fits_the_screen(page, "the refused publish")
    assert_accessible(page, "the refused publish")
    assert_keyboard_reaches_every_action(page, "the refused publish")


@pytest.mark.parametrize("width", WIDTHS)
def test_an_item_the_model_refused_shows_the_servers_reason(page, live_server, openai_server, sandbox, queue, alice,
                                                            width):
    openai_server.configure(n_ctx=2048, props=False)  # a server that does not say its context refuses the prompt
    item = make_task(1, name="Long tickets").items.get()
    item.body = "My order arrived broken and I would like my money back, please. " * 200
    item.save(update_fields=["body"])
    assert item_process(item_id=item.pk, attempt=item.attempt).startswith("failed at triage")

    login(page, "alice", "alice-pass-123")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/items/{item.pk}/")
    reason = page.locator(".reason").first
    expect(reason).to_contain_text("triage: the model API rejected the request (HTTP 400): request (")
    expect(reason).to_contain_text("exceeds the available context size (2048 tokens), try increasing it")
    assert_fits_the_screen(page, "the refused item")
    assert_accessible(page, "the refused item")
    assert_keyboard_reaches_every_action(page, "the refused item")
