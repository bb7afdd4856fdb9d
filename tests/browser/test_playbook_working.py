"""A support lead works with playbooks in the browser, by keyboard, at 390 px and at 1280 px.

A new playbook as a copy of the shipped one, renamed; many articles changed, removed and added in one save;
a YAML save refused with each error's line and nothing written; the publish confirmation with what changes
and the last labelled rehearsal decided again under the draft; then publish. Every page is axe-clean, fits the
window, and every action on it is reached with Tab.
"""

import re

import pytest
from django.contrib.auth.models import Group, User
from playwright.sync_api import expect

from tests.web.test_playbook_editing import labelled_rehearsal, regression_draft
from ticketagent.playbooks.models import Playbook, PlaybookVersion, VersionStatus
from ticketagent.playbooks.services import draft_open, draft_update, playbook_new, version_default, version_spec

from .conftest import (
    DESKTOP,
    PHONE,
    assert_accessible,
    assert_fits_the_screen,
    assert_keyboard_reaches_every_action,
    assert_no_alerts,
    login,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LAPTOP = {"width": 1280, "height": 900}
SCREENS = pytest.mark.parametrize("screen", [PHONE, LAPTOP], ids=["390px", "1280px"])


@pytest.fixture
def erin(transactional_db):
    """An editor."""
    user = User.objects.create_user("erin", password="erin-pass-123")
    user.groups.add(Group.objects.get_or_create(name="editors")[0])
    return user


def press(locator, key: str = "Enter") -> None:
    locator.focus()
    expect(locator).to_be_focused()
    locator.press(key)


def every_check(page, where: str) -> None:
    assert_fits_the_screen(page, where)
    assert_accessible(page, where)
    assert_keyboard_reaches_every_action(page, where)


@SCREENS
def test_new_copy_rename_bulk_articles_and_yaml(page, live_server, erin, screen):
    standard = version_default()
    login(page, "erin", "erin-pass-123")
    page.set_viewport_size(screen)
    page.goto("/playbooks/")
    press(page.locator("#new-playbook"))
    page.wait_for_url("**/playbooks/new/")
    every_check(page, "new playbook")
    page.get_by_label("Name").fill("Standard EU")
    page.get_by_label("Start from").select_option(label="a copy of Standard v1")
    press(page.locator("#new-create"))
    page.wait_for_url(re.compile(r"/playbooks/versions/\d+/$"))
    expect(page.locator("h1")).to_contain_text("Standard EU v1")
    copy = PlaybookVersion.objects.get(playbook__name="Standard EU")
    assert copy.articles.count() == standard.articles.count()
    every_check(page, "the new playbook's draft")

    press(page.locator("#rename-link"))
    page.wait_for_url(re.compile(r"/playbooks/\d+/#rename$"))
    every_check(page, "playbook page with rename")
    page.get_by_label("New name").fill("Standard Europe")
    press(page.locator("#rename-button"))
    expect(page.locator("#renamed")).to_have_text("Renamed.")
    assert Playbook.objects.get(pk=copy.playbook_id).name == "Standard Europe"
    assert version_spec(PlaybookVersion.objects.get(pk=copy.pk)).name == "Standard Europe"

    page.goto(f"/playbooks/versions/{copy.pk}/")
    titles = [a.title for a in version_spec(copy).articles]
    articles = page.locator("#articles")
    press(articles.locator("details.edit > summary"))
    rows = articles.locator("details.pb-fold")
    press(rows.nth(0).locator("summary"))
    rows.nth(0).get_by_label("Title").fill("Refunds, invoices and VAT")
    press(rows.nth(1).locator("summary"))
    press(rows.nth(1).get_by_label("Remove this article"), "Space")
    blank = rows.nth(len(titles))
    press(blank.locator("summary"))
    blank.get_by_label("Title").fill("Returns within 30 days")
    blank.get_by_label("Body").fill("Devices can be returned within 30 days of delivery.")
    second = rows.nth(len(titles) + 1)
    press(second.locator("summary"))
    second.get_by_label("Title").fill("Warranty")
    second.get_by_label("Body").fill("Two years on every device.")
    assert_accessible(page, "articles form open")
    press(articles.get_by_role("button", name="Save the articles"))
    expect(page.locator("#articles-saved")).to_have_text("Saved.")
    after = [a.title for a in version_spec(PlaybookVersion.objects.get(pk=copy.pk)).articles]
    assert after == ["Refunds, invoices and VAT", *titles[2:], "Returns within 30 days", "Warranty"]
    assert_fits_the_screen(page, "after the articles' save")

    before = version_spec(PlaybookVersion.objects.get(pk=copy.pk))
    yaml_box = page.locator("#yaml")
    press(yaml_box.locator("details.edit > summary"))
    text = yaml_box.get_by_label("The playbook as YAML")
    text.fill(text.input_value().replace("- name: account", "- name: billing", 1))
    press(yaml_box.get_by_role("button", name="Save the YAML"))
    error = page.locator("#yaml .pb-errors")
    expect(error).to_contain_text("Nothing was saved.")
    expect(error).to_contain_text(re.compile(r"line \d+: categories\[1\]\.name: duplicate category name 'billing'"))
    assert version_spec(PlaybookVersion.objects.get(pk=copy.pk)) == before
    every_check(page, "a YAML error")
    assert_no_alerts(page)
    assert page.console_errors == []


def test_at_390px_the_editor_of_a_large_playbook_is_a_few_screens_tall(page, live_server, erin):
    standard = version_default()
    spec = version_spec(standard).model_dump(mode="json")
    spec["articles"] = [{"title": f"Article {n}", "body": "A paragraph of help. " * 20, "tags": ["help"]}
                        for n in range(62)]
    big = playbook_new(name="Big", copy_of=standard)
    draft_update(version_id=big.pk, changes={"articles": spec["articles"]})
    login(page, "erin", "erin-pass-123")
    page.set_viewport_size(PHONE)
    page.goto(f"/playbooks/versions/{big.pk}/")
    height = page.evaluate("() => document.documentElement.scrollHeight")
    print(f"draft page with 62 articles at 390 px: {height} px tall")
    assert height < 6000, f"{height} px: the sections should read folded"
    assert_fits_the_screen(page, "62 articles")


@SCREENS
def test_publish_is_confirmed_with_the_changes_and_the_regression(page, live_server, erin, screen):
    standard = version_default()
    rehearsal = labelled_rehearsal(standard)
    draft = regression_draft(draft_open(playbook_id=standard.playbook_id, user=erin))
    login(page, "erin", "erin-pass-123")
    page.set_viewport_size(screen)
    page.goto(f"/playbooks/versions/{draft.pk}/")
    press(page.locator("#publish-button"))
    page.wait_for_url(f"**/playbooks/versions/{draft.pk}/publish/")
    expect(page.locator("h1")).to_have_text("Publish Standard v2?")
    expect(page.locator("#changes")).to_contain_text("rules[No billing replies].forbid")
    expect(page.locator("#regression-how")).to_contain_text(f"Rehearsal {rehearsal.pk}")
    agreement = page.locator("#regression-agreement tr[data-field=category]")
    expect(agreement).to_contain_text("4 of 4 (100%)")
    expect(agreement).to_contain_text("3 of 4 (75%)")
    expect(agreement).to_contain_text("worse")
    changed = page.locator("#regression-changes tbody tr")
    expect(changed).to_have_count(2)
    expect(page.locator("#regression-changes tr[data-ticket=G-3]")).to_contain_text("shipping → other")
    expect(page.locator("#regression-changes tr[data-ticket=G-1]")).to_contain_text("− notify_customer")
    every_check(page, "publish confirmation")
    assert PlaybookVersion.objects.get(pk=draft.pk).status == VersionStatus.DRAFT
    press(page.locator("#confirm-publish"))
    expect(page.locator("#version-status")).to_have_text("published")
    assert PlaybookVersion.objects.get(pk=draft.pk).status == VersionStatus.PUBLISHED


def test_discard_is_confirmed_with_what_is_thrown_away(page, live_server, erin):
    standard = version_default()
    draft = regression_draft(draft_open(playbook_id=standard.playbook_id, user=erin))
    login(page, "erin", "erin-pass-123")
    page.set_viewport_size(DESKTOP)
    page.goto(f"/playbooks/versions/{draft.pk}/")
    press(page.locator("#discard-button"))
    expect(page.locator("h1")).to_have_text("Discard the draft Standard v2?")
    expect(page.locator("#changes")).to_contain_text("categories[shipping].keywords")
    every_check(page, "discard confirmation")
    press(page.locator("#confirm-back"))
    expect(page.locator("h1")).to_contain_text("Standard v2")
    assert PlaybookVersion.objects.filter(pk=draft.pk).exists()
    press(page.locator("#discard-button"))
    press(page.locator("#confirm-discard"))
    page.wait_for_url(f"**/playbooks/{standard.playbook_id}/")
    assert not PlaybookVersion.objects.filter(pk=draft.pk).exists()
