"""The playbook pages: everyone reads, editors change drafts, a published version never changes.

Each edit goes through `draft_update()`: a change that does not validate
comes back with status 400, every error beside its field, and nothing
saved. Viewers and operators get 403 for every change; a change sent to a
published version answers 409 with the service's words.
"""

import re

import pytest
import yaml
from django.contrib.auth.models import Group, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from ticketagent.playbooks.diff import specs_diff
from ticketagent.playbooks.files import spec_to_yaml
from ticketagent.playbooks.models import Article, Playbook, PlaybookVersion, VersionStatus
from ticketagent.playbooks.services import draft_open, draft_update, version_default, version_spec
from ticketagent.web.playbook_forms import ChecksForm

from .conftest import HTMX

pytestmark = [pytest.mark.django_db]

ACME = "docs/examples/playbook-acme.yaml"


@pytest.fixture
def erin(db):
    """An editor: changes playbooks."""
    user = User.objects.create_user("erin", password="erin-pass-123")
    user.groups.add(Group.objects.get_or_create(name="editors")[0])
    return user


@pytest.fixture
def published():
    """The shipped playbook, published as v1."""
    return version_default()


@pytest.fixture
def draft(published, erin):
    """v2 of the shipped playbook: an open draft, with one rule."""
    version = draft_open(playbook_id=published.playbook_id, user=erin)
    rule = {"name": "Never close billing", "when": ["category is billing"], "forbid": ["close_ticket"]}
    return draft_update(version_id=version.pk, changes={"rules": [rule]}, user=erin)


def spec_of(version):
    """The version's spec as it is in the database now."""
    return version_spec(PlaybookVersion.objects.get(pk=version.pk))


def content_of(version) -> tuple:
    version = PlaybookVersion.objects.get(pk=version.pk)
    return version.content, list(version.articles.values_list("title", "body", "tags", "enabled"))


# --------------------------------------------------------------------------- form data as the pages send it


def guidance_data(spec, **changes) -> dict:
    return {f"guidance-{k}": v for k, v in {**spec.guidance.model_dump(), **changes}.items()}


def rows_data(prefix: str, rows: list[dict], *, initial: int | None = None) -> dict:
    data = {f"{prefix}-TOTAL_FORMS": str(len(rows)), f"{prefix}-INITIAL_FORMS": str(len(rows) if initial is None
                                                                                   else initial),
            f"{prefix}-MIN_NUM_FORMS": "0", f"{prefix}-MAX_NUM_FORMS": "1000"}
    for i, row in enumerate(rows):
        for key, value in row.items():
            if value is not False:
                data[f"{prefix}-{i}-{key}"] = value
    return data


def category_row(category: dict, **changes) -> dict:
    row = {**{k: category[k] for k in ("name", "description", "priority")},
           "keywords": ", ".join(category["keywords"]), **category["escalate_to"]}
    return {**row, **changes}


def categories_data(spec, *, change: dict | None = None, add: dict | None = None, remove: int | None = None) -> dict:
    rows = [category_row(c) for c in spec.model_dump(mode="json")["categories"]]
    for i, fields in (change or {}).items():
        rows[i].update(fields)
    if remove is not None:
        rows[remove]["DELETE"] = "on"
    initial = len(rows)
    if add is not None:
        rows.append({"name": "", "description": "", "priority": "normal", "keywords": "", "rt_queue": "",
                     "rt_owner": "", "zendesk_group": "", **add})
    return rows_data("categories", rows, initial=initial)


def rules_data(rules: list[dict]) -> dict:
    rows = [{"name": r["name"], "when": "\n".join(r["when"]), **{k: r.get(k, []) for k in ("forbid", "require",
                                                                                          "approve")}}
            for r in rules]
    return rows_data("rules", rows)


def reply_data(spec, **changes) -> dict:
    data = {f"reply-{k}": v for k, v in spec.reply.model_dump().items()}
    checks = ChecksForm(checks=spec.checks.model_dump()).initial  # lists as the page shows them
    data.update({f"checks-{k}": v for k, v in checks.items() if v is not False})
    data = {k: ("on" if v is True else v) for k, v in data.items()}
    data.update(changes)
    return data


def article_row(title="Refund times", body="Refunds take 5 business days.", tags="billing, refund",
                enabled=True) -> dict:
    return {"title": title, "body": body, "tags": tags, "enabled": "on" if enabled else False}


def articles_data(spec, *, change: dict | None = None, add: list[dict] = (), remove=()) -> dict:
    """The articles form as the page sends it: every article, the changes, rows to remove, new rows filled in."""
    rows = [article_row(a.title, a.body, ", ".join(a.tags), a.enabled) for a in spec.articles]
    for i, fields in (change or {}).items():
        rows[i].update(fields)
    for i in remove:
        rows[i]["DELETE"] = "on"
    initial = len(rows)
    rows += [*add, article_row("", "", "")]  # the blank row the page always has
    return rows_data("articles", rows, initial=initial)


def edits(version) -> dict[str, tuple[str, dict]]:
    """Every change a page can send to `version`, with valid data: url, POST data."""
    spec = spec_of(version)
    pk = version.pk
    return {
        "guidance": (reverse("playbook-guidance", args=[pk]), guidance_data(spec, tone="Short and kind.")),
        "categories": (reverse("playbook-categories", args=[pk]), categories_data(spec, change={0: {
            "description": "Money questions."}})),
        "rules": (reverse("playbook-rules", args=[pk]), rules_data([{"name": "Hold urgent closes",
                                                                     "when": ["priority is urgent"],
                                                                     "approve": ["close_ticket"]}])),
        "reply": (reverse("playbook-reply", args=[pk]), reply_data(spec, **{"reply-max_chars": "1500"})),
        "articles": (reverse("playbook-articles", args=[pk]), articles_data(spec, change={0: {"title": "Refunds"}},
                                                                            add=[article_row()])),
        "yaml": (reverse("playbook-yaml", args=[pk]),
                 {"yaml-text": spec_to_yaml(spec).replace("Escalate urgent tickets", "Escalate urgent tickets now")}),
        "publish": (reverse("playbook-publish", args=[pk]), {}),
        "discard": (reverse("playbook-discard", args=[pk]), {}),
    }


# --------------------------------------------------------------------------- reading


class TestReading:
    def test_the_list_shows_every_version_with_status_publisher_time_and_hash(self, client, bob, draft, erin):
        client.force_login(bob)
        body = client.get(reverse("playbooks")).content.decode()
        v1 = PlaybookVersion.objects.get(playbook=draft.playbook, number=1)
        assert "Standard" in body and f'id="version-{v1.pk}"' in body and f'id="version-{draft.pk}"' in body
        assert v1.content_hash[:12] in body and "published" in body and "draft" in body
        assert "opened by erin" in body
        assert 'id="import-form"' not in body and "Only editors change playbooks" in body

    def test_an_editor_is_offered_the_import_form_and_the_draft(self, client, erin, draft):
        client.force_login(erin)
        body = client.get(reverse("playbooks")).content.decode()
        assert 'id="import-form"' in body
        assert reverse("playbook-version", args=[draft.pk]) in body and "Edit the draft (v2)" in body

    def test_a_version_reads_as_guidance_categories_rules_reply_and_articles(self, client, alice, draft):
        client.force_login(alice)
        response = client.get(reverse("playbook-version", args=[draft.pk]))
        body = response.content.decode()
        assert response.status_code == 200
        assert "Write to {{customer_name}}" in body  # the guidance, as written
        assert "<b>billing</b>" in body and "refund*, invoice*, charge*" in body
        assert "When category is billing → forbid close_ticket" in re.sub(r"<[^>]+>", "", body)
        assert "Best regards" in body and "the ticket's language" in body
        assert "<summary>Read" in body and "Refunds are issued to the original payment method" in body

    def test_readers_get_no_edit_controls_even_on_a_draft(self, client, bob, alice, draft):
        for user in (bob, alice):
            client.force_login(user)
            body = client.get(reverse("playbook-version", args=[draft.pk])).content.decode()
            for marker in ("guidance-form", "categories-form", "rules-form", "reply-form", "articles-form", "yaml-form",
                           "publish-button", "discard-button", "Edit (open a draft)"):
                assert marker not in body, (user.username, marker)

    def test_a_published_version_shows_no_edit_forms_to_an_editor(self, client, erin, published):
        client.force_login(erin)
        body = client.get(reverse("playbook-version", args=[published.pk])).content.decode()
        assert "guidance-form" not in body and "publish-button" not in body
        assert "Edit (open a draft)" in body

    def test_export_is_a_yaml_download_of_the_whole_spec(self, client, bob, published):
        client.force_login(bob)
        response = client.get(reverse("playbook-export", args=[published.pk]))
        assert response.status_code == 200 and response["Content-Type"].startswith("application/yaml")
        assert response["Content-Disposition"] == 'attachment; filename="standard-v1.yaml"'
        assert yaml.safe_load(response.content) == spec_of(published).model_dump(mode="json")

    @pytest.mark.parametrize("name", ["playbooks", "playbook", "playbook-version", "playbook-diff",
                                      "playbook-export"])
    def test_every_page_needs_a_login(self, name, client, published):
        args = {"playbook": [published.playbook_id], "playbook-diff": [published.playbook_id],
                "playbook-version": [published.pk], "playbook-export": [published.pk]}.get(name, [])
        response = client.get(reverse(name, args=args))
        assert response.status_code == 302 and response["Location"].startswith(reverse("login"))

    def test_unknown_playbooks_and_versions_are_404(self, client, bob, published):
        client.force_login(bob)
        for url in (reverse("playbook", args=[999]), reverse("playbook-version", args=[999]),
                    reverse("playbook-export", args=[999]), reverse("playbook-diff", args=[999]),
                    reverse("playbook-diff", args=[published.playbook_id]) + "?a=7"):
            assert client.get(url).status_code == 404, url


# --------------------------------------------------------------------------- who may change what


EDITS = ["guidance", "categories", "rules", "reply", "articles", "yaml", "publish", "discard"]


@pytest.mark.parametrize("edit", EDITS)
class TestEveryChange:
    def test_viewers_and_operators_get_403_and_nothing_changes(self, edit, client, bob, alice, draft):
        url, data = edits(draft)[edit]
        before = content_of(draft)
        for user in (bob, alice):
            client.force_login(user)
            assert client.post(url, data).status_code == 403
            assert client.post(url, data, headers=HTMX).status_code == 403
        assert content_of(draft) == before
        assert PlaybookVersion.objects.get(pk=draft.pk).status == VersionStatus.DRAFT

    def test_anonymous_users_are_sent_to_login(self, edit, client, draft):
        url, data = edits(draft)[edit]
        response = client.post(url, data)
        assert response.status_code == 302 and response["Location"].startswith(reverse("login"))

    def test_an_editor_changes_the_draft(self, edit, client, erin, draft):
        url, data = edits(draft)[edit]
        before = content_of(draft)
        client.force_login(erin)
        response = client.post(url, data)
        assert response.status_code == 302, response.content.decode()[:2000]
        if edit == "discard":
            assert not PlaybookVersion.objects.filter(pk=draft.pk).exists()
        elif edit == "publish":
            assert PlaybookVersion.objects.get(pk=draft.pk).status == VersionStatus.PUBLISHED
        else:
            assert content_of(draft) != before

    def test_a_published_version_answers_409_and_does_not_change(self, edit, client, erin, published):
        url, data = edits(published)[edit]
        before = content_of(published)
        client.force_login(erin)
        for headers in ({}, HTMX):
            response = client.post(url, data, headers=headers)
            assert response.status_code == 409
            assert "Standard v1 is published and cannot change" in response.content.decode()
        assert content_of(published) == before
        assert PlaybookVersion.objects.filter(pk=published.pk, status=VersionStatus.PUBLISHED).exists()

    def test_an_unknown_version_is_404(self, edit, client, erin, draft):
        url, data = edits(draft)[edit]
        client.force_login(erin)
        assert client.post(url.replace(f"/versions/{draft.pk}/", "/versions/999/"), data).status_code == 404

    def test_get_changes_nothing(self, edit, client, erin, draft):
        url, _ = edits(draft)[edit]
        client.force_login(erin)
        before = content_of(draft)
        assert client.get(url).status_code == (200 if edit in ("publish", "discard") else 405)  # a confirmation
        assert content_of(draft) == before


@pytest.mark.parametrize("name", ["playbook-draft", "playbook-import"])
def test_opening_a_draft_and_importing_are_for_editors(name, client, bob, alice, published):
    args = [published.playbook_id] if name == "playbook-draft" else []
    data = {} if name == "playbook-draft" else {"file": SimpleUploadedFile("acme.yaml", open(ACME, "rb").read())}
    for user in (bob, alice):
        client.force_login(user)
        assert client.post(reverse(name, args=args), data).status_code == 403
    assert PlaybookVersion.objects.count() == 1 and Playbook.objects.count() == 1


def test_edit_opens_the_draft_once(client, erin, published):
    client.force_login(erin)
    first = client.post(reverse("playbook-draft", args=[published.playbook_id]))
    second = client.post(reverse("playbook-draft", args=[published.playbook_id]))
    draft = PlaybookVersion.objects.get(playbook=published.playbook, status=VersionStatus.DRAFT)
    assert first["Location"] == second["Location"] == reverse("playbook-version", args=[draft.pk])
    assert draft.number == 2 and draft.based_on_id == published.pk and draft.created_by == erin
    assert spec_of(draft) == spec_of(published)


# --------------------------------------------------------------------------- saving


class TestSaving:
    def test_a_save_comes_back_as_its_section_with_htmx(self, client, erin, draft):
        client.force_login(erin)
        url, data = edits(draft)["guidance"]
        response = client.post(url, data, headers=HTMX)
        body = response.content.decode()
        assert response.status_code == 200 and "<html" not in body
        assert body.lstrip().startswith('<section class="card pb-section" id="guidance"')
        assert "Saved." in body and "Short and kind." in body
        assert spec_of(draft).guidance.tone == "Short and kind."

    def test_without_javascript_a_save_goes_back_to_the_section(self, client, erin, draft):
        client.force_login(erin)
        url, data = edits(draft)["rules"]
        response = client.post(url, data)
        assert response["Location"] == reverse("playbook-version", args=[draft.pk]) + "?saved=rules#rules"
        assert 'id="rules-saved"' in client.get(response["Location"]).content.decode()

    def test_categories_are_added_changed_and_removed_with_comma_keywords(self, client, erin, draft):
        client.force_login(erin)
        spec = spec_of(draft)
        data = categories_data(spec, change={1: {"keywords": "password, two-factor ,  sso"}}, remove=3,
                               add={"name": "returns", "description": "Sending things back.", "priority": "high",
                                    "keywords": "return, refund", "rt_queue": "Orders"})
        assert client.post(reverse("playbook-categories", args=[draft.pk]), data).status_code == 302
        after = spec_of(draft)
        names = [c.name for c in after.categories]
        assert "shipping" not in names and names[-1] == "returns"
        assert after.category("account").keywords == ["password", "two-factor", "sso"]
        added = after.category("returns")
        assert added.priority == "high" and added.escalate_to.rt_queue == "Orders"

    def test_a_blank_new_row_adds_nothing(self, client, erin, draft):
        client.force_login(erin)
        spec = spec_of(draft)
        response = client.post(reverse("playbook-categories", args=[draft.pk]), categories_data(spec, add={}))
        assert response.status_code == 302
        assert spec_of(draft).categories == spec.categories

    def test_rules_take_one_condition_a_line_and_checkbox_actions(self, client, erin, draft):
        client.force_login(erin)
        rule = {"name": "Angry billing goes to a person", "when": ["category is billing", "sentiment is negative"],
                "require": ["escalate"], "approve": ["notify_customer", "close_ticket"]}
        data = rules_data([rule])
        data["rules-0-when"] = "category is billing\n\n  sentiment is negative  \n"
        assert client.post(reverse("playbook-rules", args=[draft.pk]), data).status_code == 302
        [saved] = spec_of(draft).rules
        assert saved.when == rule["when"] and saved.require == ["escalate"]
        assert saved.approve == ["notify_customer", "close_ticket"] and saved.forbid == []
        body = client.get(reverse("playbook-version", args=[draft.pk])).content.decode()
        assert ("When category is billing and sentiment is negative → require escalate; hold notify_customer, "
                "close_ticket for approval") in re.sub(r"<[^>]+>", "", body)

    def test_editing_a_rule_keeps_what_the_form_does_not_show(self, client, erin, draft):
        rule = {"name": "Legal", "when": ["ticket.text contains lawyer"], "any_of": ["category is billing",
                "category is shipping"], "require": ["escalate"], "escalate_to": {"rt_queue": "finance-legal"},
                "priority_at_least": "high", "hold_reason": "a lead approves"}
        draft_update(version_id=draft.pk, changes={"rules": [rule]}, user=erin)
        client.force_login(erin)
        data = rules_data([{**rule, "forbid": ["close_ticket"]}])
        assert client.post(reverse("playbook-rules", args=[draft.pk]), data).status_code == 302
        [saved] = spec_of(draft).rules
        assert saved.forbid == ["close_ticket"] and saved.any_of == rule["any_of"]
        assert saved.escalate_to.rt_queue == "finance-legal" and saved.priority_at_least == "high"
        assert saved.hold_reason == "a lead approves"

    def test_an_article_is_added_changed_and_removed(self, client, erin, draft):
        client.force_login(erin)
        count = draft.articles.count()
        url = reverse("playbook-articles", args=[draft.pk])
        client.post(url, articles_data(spec_of(draft), add=[article_row(enabled=False)]))
        assert list(spec_of(draft).articles[-1].tags) == ["billing", "refund"]
        assert spec_of(draft).articles[-1].enabled is False
        client.post(url, articles_data(spec_of(draft), change={count: {"title": "Refund times (EU)"}}))
        assert spec_of(draft).articles[-1].title == "Refund times (EU)"
        response = client.post(url, articles_data(spec_of(draft), remove=[0]), headers=HTMX)
        assert response.status_code == 200 and 'id="articles"' in response.content.decode()
        titles = [a.title for a in spec_of(draft).articles]
        assert len(titles) == count and "Refunds and invoices" not in titles
        assert Article.objects.filter(version=draft, title="Refund times (EU)").exclude(search=None).exists()


class TestABadEditSavesNothing:
    def test_a_duplicate_category_is_named_on_its_row(self, client, erin, draft):
        client.force_login(erin)
        before = content_of(draft)
        data = categories_data(spec_of(draft), change={2: {"name": "billing"}})
        response = client.post(reverse("playbook-categories", args=[draft.pk]), data)
        body = response.content.decode()
        assert response.status_code == 400
        assert "Nothing was saved" in body and "categories[2].name: duplicate category name &#x27;billing&#x27;" in body
        row = body[body.index('id="categories-row-2"'):body.index('id="categories-row-3"')]
        assert "duplicate category name" in row, "the error is beside the row's field"
        assert content_of(draft) == before

    def test_an_unknown_condition_field_is_named_with_its_line(self, client, erin, draft):
        client.force_login(erin)
        before = content_of(draft)
        data = rules_data([{"name": "By plan", "when": ["category is billing", "plan is pro"],
                            "forbid": ["close_ticket"]}])
        response = client.post(reverse("playbook-rules", args=[draft.pk]), data, headers=HTMX)
        body = response.content.decode()
        assert response.status_code == 400 and "<html" not in body
        assert "rules[0].when[1]: unknown field &#x27;plan&#x27;" in body
        assert "line 2: unknown field &#x27;plan&#x27;" in body
        assert "<details class=\"edit\" open>" in body
        assert content_of(draft) == before

    def test_a_rule_that_does_nothing_is_named_on_its_row(self, client, erin, draft):
        client.force_login(erin)
        response = client.post(reverse("playbook-rules", args=[draft.pk]),
                               rules_data([{"name": "Idle", "when": ["category is billing"]}]))
        assert response.status_code == 400
        assert "rules[0]: a rule forbids, requires or holds for approval at least one action" in (
            response.content.decode())

    def test_an_unknown_placeholder_is_named_beside_its_section(self, client, erin, draft):
        client.force_login(erin)
        before = content_of(draft)
        spec = spec_of(draft)
        response = client.post(reverse("playbook-guidance", args=[draft.pk]),
                               guidance_data(spec, policies="Mention {{plan}}."))
        body = response.content.decode()
        assert response.status_code == 400 and "guidance.policies: unknown placeholder {{plan}}" in body
        field = body[body.index('id="id_guidance-policies"'):body.index('id="id_guidance-escalation"')]
        assert "unknown placeholder {{plan}}" in field
        assert content_of(draft) == before

    def test_an_oversized_article_is_refused(self, client, erin, draft):
        client.force_login(erin)
        count = draft.articles.count()
        response = client.post(reverse("playbook-articles", args=[draft.pk]),
                               articles_data(spec_of(draft), add=[article_row(body="x" * 5001)]))
        assert response.status_code == 400
        assert f"articles[{count}].body: String should have at most 5000 characters" in response.content.decode()
        assert draft.articles.count() == count

    def test_removing_every_category_is_refused(self, client, erin, draft):
        client.force_login(erin)
        before = content_of(draft)
        data = categories_data(spec_of(draft))
        for key in [k for k in data if k.endswith("-name")]:
            data[key.replace("-name", "-DELETE")] = "on"
        response = client.post(reverse("playbook-categories", args=[draft.pk]), data)
        assert response.status_code == 400 and "categories: List should have at least 1 item" in (
            response.content.decode())
        assert content_of(draft) == before

    def test_a_number_that_is_no_number_is_refused(self, client, erin, draft):
        client.force_login(erin)
        before = content_of(draft)
        response = client.post(reverse("playbook-reply", args=[draft.pk]),
                               reply_data(spec_of(draft), **{"reply-max_chars": "lots"}))
        assert response.status_code == 400 and "Enter a whole number" in response.content.decode()
        response = client.post(reverse("playbook-reply", args=[draft.pk]),
                               reply_data(spec_of(draft), **{"reply-max_chars": "50"}))
        assert response.status_code == 400
        assert "reply.max_chars: Input should be greater than or equal to 100" in response.content.decode()
        assert content_of(draft) == before


# --------------------------------------------------------------------------- publish, discard, diff, import


def test_publish_freezes_the_version(client, erin, draft):
    client.force_login(erin)
    response = client.post(reverse("playbook-publish", args=[draft.pk]))
    assert response["Location"] == reverse("playbook-version", args=[draft.pk])
    version = PlaybookVersion.objects.get(pk=draft.pk)
    assert version.status == VersionStatus.PUBLISHED and version.published_by == erin
    assert version.content_hash == spec_of(version).content_hash()
    before = content_of(version)
    url, data = edits(version)["guidance"]
    response = client.post(url, data)
    assert response.status_code == 409 and "Standard v2 is published and cannot change" in response.content.decode()
    assert content_of(version) == before
    body = client.get(reverse("playbook-version", args=[draft.pk])).content.decode()
    assert "guidance-form" not in body and version.content_hash[:12] in body and "published by erin" in body


def test_the_draft_page_says_published_versions_are_frozen(client, erin, draft):
    client.force_login(erin)
    body = client.get(reverse("playbook-version", args=[draft.pk])).content.decode()
    assert "Published versions are frozen" in body and "Publish v2…" in body


def test_discarding_a_draft_leaves_the_published_version(client, erin, draft):
    client.force_login(erin)
    response = client.post(reverse("playbook-discard", args=[draft.pk]))
    assert response["Location"] == reverse("playbook", args=[draft.playbook_id])
    assert list(PlaybookVersion.objects.values_list("number", "status")) == [(1, "published")]


def test_the_first_draft_cannot_be_discarded(client, erin):
    client.force_login(erin)
    client.post(reverse("playbook-import"), {"file": SimpleUploadedFile("acme.yaml", open(ACME, "rb").read())})
    version = PlaybookVersion.objects.get(playbook__name="Acme Cloud support")
    response = client.post(reverse("playbook-discard", args=[version.pk]))
    assert response.status_code == 409 and "nothing to go back to" in response.content.decode()
    assert PlaybookVersion.objects.filter(pk=version.pk).exists()


def test_the_diff_lists_each_change_side_by_side(client, bob, draft):
    draft_update(version_id=draft.pk, changes={"guidance": {**spec_of(draft).guidance.model_dump(),
                                                           "tone": "Short and kind."}})
    client.force_login(bob)
    response = client.get(reverse("playbook-diff", args=[draft.playbook_id]))  # the newest and the one before
    body = response.content.decode()
    assert response.status_code == 200
    changes = specs_diff(spec_of(PlaybookVersion.objects.get(playbook=draft.playbook, number=1)), spec_of(draft))
    assert {c.field for c in changes} == {"guidance.tone", *(f"rules[Never close billing].{k}"
                                                             for k in ("when", "forbid", "require", "approve"))}
    assert f"<b>{len(changes)}</b> changes from" in body
    assert "<code>guidance.tone</code>" in body and "Short and kind." in body and "Write to {{customer_name}}" in body
    assert "<code>rules[Never close billing].forbid</code>" in body and "(not there)" in body
    assert 'class="pill k-added">added' in body and 'class="pill k-changed">changed' in body
    reverse_body = client.get(reverse("playbook-diff", args=[draft.playbook_id]) + "?a=2&b=1").content.decode()
    assert 'class="pill k-removed">removed' in reverse_body


def test_a_file_becomes_a_new_playbook(client, erin):
    client.force_login(erin)
    response = client.post(reverse("playbook-import"),
                           {"file": SimpleUploadedFile("acme.yaml", open(ACME, "rb").read()), "publish": "on"})
    version = PlaybookVersion.objects.get(playbook__name="Acme Cloud support")
    assert response["Location"] == reverse("playbook-version", args=[version.pk])
    assert version.status == VersionStatus.PUBLISHED and version.published_by == erin
    assert version.articles.count() == len(yaml.safe_load(open(ACME))["articles"])


def test_a_bad_file_creates_nothing_and_names_each_error(client, erin):
    client.force_login(erin)
    data = yaml.safe_load(open(ACME))
    data["categories"][1]["name"] = "billing"
    data["rules"][0]["forbid"] = ["refund_everyone"]
    response = client.post(reverse("playbook-import"),
                           {"file": SimpleUploadedFile("acme.yaml", yaml.safe_dump(data).encode())})
    body = response.content.decode()
    assert response.status_code == 400 and "nothing was changed" in body
    assert "categories[1].name: duplicate category name" in body and "rules[0].forbid[0]" in body
    assert Playbook.objects.count() == 0
    response = client.post(reverse("playbook-import"), {"file": SimpleUploadedFile("x.yaml", b"\xff\xfe[")})
    assert response.status_code == 400 and "x.yaml: not UTF-8 text" in response.content.decode()
