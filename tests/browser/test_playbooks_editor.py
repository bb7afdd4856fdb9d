"""An editor changes the shipped playbook in the browser, by keyboard: draft, edit, publish, compare.

From the "Standard" playbook (v1, published) an editor opens a draft,
changes the guidance, a category, a rule (a wrong condition first: the
error is shown beside its line and nothing is saved) and an article,
publishes v2, and reads the change on the diff page. Every page is
axe-clean, reachable by keyboard, and fits a 390 px phone with its forms
open. A viewer reads the same pages and gets no edit control. Without
JavaScript the same forms save, refuse and publish by plain POSTs.
"""

import re

import pytest
from django.contrib.auth.models import Group, User
from playwright.sync_api import expect

from ticketagent.playbooks.models import PlaybookVersion, VersionStatus
from ticketagent.playbooks.services import version_default, version_spec

from .conftest import (
    DESKTOP,
    PHONE,
    assert_accessible,
    assert_fits_the_screen,
    assert_keyboard_reaches_every_action,
    assert_no_alerts,
    assert_same_page,
    docs_screenshot,
    login,
    mark_page,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NEW_TONE = "Write to {{customer_name}} in two or three short sentences."


@pytest.fixture
def erin(transactional_db):
    """An editor."""
    user = User.objects.create_user("erin", password="erin-pass-123")
    user.groups.add(Group.objects.get_or_create(name="editors")[0])
    return user


def press(locator, key: str = "Enter") -> None:
    """Operate a control by keyboard: focus it, press the key."""
    locator.focus()
    expect(locator).to_be_focused()
    locator.press(key)


def open_editor(page, section: str, summary: str):
    """Open a section's edit form (its <details>) by keyboard; the section."""
    box = page.locator(f"#{section}")
    toggle = box.locator("details.edit > summary", has_text=summary)
    press(toggle)
    expect(toggle.locator("xpath=..")).to_have_attribute("open", "")
    return box


def test_an_editor_drafts_edits_publishes_and_compares_by_keyboard(page, live_server, erin):
    v1 = version_default()
    login(page, "erin", "erin-pass-123")
    press(page.locator("#nav-playbooks"))
    page.wait_for_url("**/playbooks/")
    expect(page.locator(f"#version-{v1.pk}")).to_contain_text(v1.content_hash[:12])
    assert_accessible(page, "playbooks")
    assert_keyboard_reaches_every_action(page, "playbooks")
    docs_screenshot(page.locator("main"), "playbook-list")

    press(page.get_by_role("button", name="Edit Standard"))
    page.wait_for_url(re.compile(r"/playbooks/versions/\d+/$"))
    draft = PlaybookVersion.objects.get(playbook=v1.playbook, status=VersionStatus.DRAFT)
    expect(page.locator("h1")).to_contain_text("Standard v2")
    expect(page.locator("#publish-note")).to_contain_text("Published versions are frozen")
    assert_accessible(page, "draft")
    assert_keyboard_reaches_every_action(page, "draft")
    mark_page(page)

    guidance = open_editor(page, "guidance", "Edit the guidance")
    guidance.get_by_label("Tone").fill(NEW_TONE)
    press(guidance.get_by_role("button", name="Save the guidance"))
    expect(page.locator("#guidance-saved")).to_have_text("Saved.")
    expect(page.locator("#guidance dl")).to_contain_text("in two or three short sentences")

    categories = open_editor(page, "categories", "Edit the categories")
    categories.locator("#id_categories-0-keywords").fill("refund, invoice, charge, payment, billing, vat")
    new_row = categories.locator("#categories-row-6")
    new_row.get_by_label("Name").fill("returns")
    new_row.get_by_label("Description").fill("Sending a device back.")
    new_row.get_by_label("Priority").select_option("high")
    press(categories.get_by_role("button", name="Save the categories"))
    expect(page.locator("#categories-saved")).to_be_visible()
    expect(page.locator("#categories table")).to_contain_text("Sending a device back.")
    expect(page.locator("#categories table")).to_contain_text("vat")

    rules = open_editor(page, "rules", "Edit the rules")
    row = rules.locator("#rules-row-0")
    row.get_by_label("Name").fill("Never close billing")
    row.get_by_label("Conditions").fill("category is billing\nplan is pro")
    press(row.locator("fieldset", has_text="Forbid").get_by_label("close_ticket"), "Space")
    press(rules.get_by_role("button", name="Save the rules"))
    error = page.locator("#rules-row-0 .error")
    expect(error).to_contain_text("line 2: unknown field 'plan'")
    expect(page.locator("#rules .pb-errors")).to_contain_text("Nothing was saved")
    assert version_spec(PlaybookVersion.objects.get(pk=draft.pk)).rules == []
    docs_screenshot(page.locator("#rules"), "playbook-rule-error")
    page.locator("#rules-row-0").get_by_label("Conditions").fill("category is billing")
    expect(page.locator("#rules-row-0").locator("fieldset", has_text="Forbid").get_by_label("close_ticket")).to_be_checked()
    press(page.locator("#rules").get_by_role("button", name="Save the rules"))
    expect(page.locator("#rules-saved")).to_be_visible()
    expect(page.locator("#rules ol.rules")).to_contain_text("When category is billing → forbid close_ticket")

    articles = open_editor(page, "articles", "Edit, add or remove articles")
    blank = articles.locator("details.pb-fold", has=page.locator("summary", has_text="Add an article")).first
    press(blank.locator("summary"))
    blank.get_by_label("Title").fill("Returns within 30 days")
    blank.get_by_label("Body").fill("Devices can be returned within 30 days of delivery.")
    blank.get_by_label("Tags").fill("returns, device")
    press(articles.get_by_role("button", name="Save the articles"))
    expect(page.locator("#articles-saved")).to_be_visible()
    added = page.locator("ol.articles > li").last
    expect(added.locator("h3")).to_have_text("Returns within 30 days")
    press(added.locator("details.body summary"))
    expect(added).to_contain_text("Devices can be returned within 30 days of delivery.")
    assert_same_page(page)
    assert_accessible(page, "draft after edits")

    press(page.locator("#publish-button"))
    expect(page.locator("h1")).to_have_text("Publish Standard v2?")
    press(page.locator("#confirm-publish"))
    expect(page.locator("#version-status")).to_have_text("published")
    expect(page.locator("#guidance-form")).to_have_count(0)
    v2 = PlaybookVersion.objects.get(pk=draft.pk)
    assert v2.status == VersionStatus.PUBLISHED and v2.published_by == erin
    expect(page.locator("#version-hash")).to_have_text(v2.content_hash[:12])

    press(page.locator("#compare-link"))
    page.wait_for_url("**/diff/?b=2")
    change = page.locator("table.pb-diff tr", has=page.locator("code", has_text="guidance.tone"))
    expect(change.locator("td").nth(1)).to_contain_text("friendly, plain and short")
    expect(change.locator("td").nth(2)).to_contain_text("in two or three short sentences")
    expect(change.locator("td").nth(3)).to_have_text("changed")
    expect(page.locator("table.pb-diff")).to_contain_text("categories[returns].description")
    assert_accessible(page, "diff")
    assert_keyboard_reaches_every_action(page, "diff")
    docs_screenshot(page.locator("main"), "playbook-diff")
    page.set_viewport_size(PHONE)  # the columns stack: each change reads as a card
    assert_fits_the_screen(page, "diff at phone width")
    before, after = change.locator("td").nth(1).bounding_box(), change.locator("td").nth(2).bounding_box()
    assert before["x"] == after["x"] and after["y"] > before["y"], "before and after stack"
    docs_screenshot(change, "playbook-diff-phone")
    assert_no_alerts(page)
    assert page.console_errors == []


def test_at_phone_width_the_editor_fits_and_a_viewer_reads_without_controls(page, live_server, erin, bob):
    v1 = version_default()
    login(page, "erin", "erin-pass-123")
    page.set_viewport_size(PHONE)
    page.goto("/playbooks/")
    assert_fits_the_screen(page, "playbooks")
    press(page.get_by_role("button", name="Edit Standard"))
    page.wait_for_url(re.compile(r"/playbooks/versions/\d+/$"))
    for section, summary in (("guidance", "Edit the guidance"), ("categories", "Edit the categories"),
                             ("rules", "Edit the rules"), ("reply", "Edit the reply settings"),
                             ("articles", "Edit, add or remove articles"), ("yaml", "Edit as YAML")):
        open_editor(page, section, summary)
    assert_fits_the_screen(page, "draft with every form open")
    assert_accessible(page, "draft at phone width")
    page.goto(f"/playbooks/{v1.playbook_id}/diff/?a=1&b=2")
    assert_fits_the_screen(page, "diff")
    row = page.locator("table.pb-diff tbody tr").first
    expect(row).to_contain_text("No differences.")  # a fresh draft is a copy

    page.context.clear_cookies()
    login(page, "bob", "bob-pass-123")
    page.set_viewport_size(DESKTOP)
    page.goto("/playbooks/")
    expect(page.locator("#readers-note")).to_be_visible()
    expect(page.get_by_role("button", name=re.compile("^Edit"))).to_have_count(0)
    page.get_by_role("link", name="v2", exact=True).click()
    expect(page.locator("#draft-note")).to_be_visible()
    expect(page.locator("details.edit")).to_have_count(0)
    expect(page.locator("#publish-button")).to_have_count(0)
    assert_accessible(page, "a draft, read by a viewer")
    assert_keyboard_reaches_every_action(page, "a draft, read by a viewer")


@pytest.mark.parametrize("page", [{"javascript": False}], indirect=True)
def test_without_javascript_an_editor_saves_and_publishes(page, live_server, erin):
    v1 = version_default()
    login(page, "erin", "erin-pass-123")
    page.goto("/playbooks/")
    page.get_by_role("button", name="Edit Standard").click()
    page.wait_for_url(re.compile(r"/playbooks/versions/\d+/$"))
    guidance = open_editor(page, "guidance", "Edit the guidance")
    guidance.get_by_label("Tone").fill("{{plan}}")
    guidance.get_by_role("button", name="Save the guidance").click()
    expect(page.locator("#guidance .error").first).to_contain_text("unknown placeholder {{plan}}")
    page.locator("#guidance").get_by_label("Tone").fill(NEW_TONE)
    page.locator("#guidance").get_by_role("button", name="Save the guidance").click()
    page.wait_for_url(re.compile(r"\?saved=guidance#guidance$"))
    expect(page.locator("#guidance-saved")).to_be_visible()
    page.locator("#publish-button").click()
    page.locator("#confirm-publish").click()
    expect(page.locator("#version-status")).to_have_text("published")
    page.locator("#compare-link").click()
    expect(page.locator("table.pb-diff")).to_contain_text("guidance.tone")
    assert PlaybookVersion.objects.filter(playbook=v1.playbook, status=VersionStatus.PUBLISHED).count() == 2
