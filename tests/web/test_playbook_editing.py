"""Working with playbooks: a new one (empty or a copy), a rename, the whole draft as YAML, and publish or
discard only after a confirmation that shows what changes -- for publish, with the last labelled rehearsal
decided again under the draft.

Everything is done through the pages by an editor (erin); viewers and operators get 403. A refused change
writes nothing: the tests compare the rows before and after.
"""

import csv
import io

import pytest
from django.contrib.auth.models import Group, User
from django.urls import reverse
from django.utils import timezone

from ticketagent.llm.offline import OfflineModel
from ticketagent.llm.schemas import SCHEMA_VERSION
from ticketagent.models import Checkpoint, Event, Item, ItemStatus, Task, TaskStatus
from ticketagent.pipeline.model_steps import run_model_step
from ticketagent.plan import PLAN_VERSION
from ticketagent.playbooks import services as playbook_services
from ticketagent.playbooks.files import spec_to_yaml
from ticketagent.playbooks.models import Playbook, PlaybookVersion, VersionStatus
from ticketagent.playbooks.services import draft_open, draft_update, version_default, version_spec
from ticketagent.services.upload import task_upload

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def erin(db):
    """An editor."""
    user = User.objects.create_user("erin", password="erin-pass-123")
    user.groups.add(Group.objects.get_or_create(name="editors")[0])
    return user


@pytest.fixture
def standard():
    return version_default()


def rows_of(version) -> tuple:
    version = PlaybookVersion.objects.get(pk=version.pk)
    return version.content, list(version.articles.values_list("title", "body", "tags", "enabled"))


# --------------------------------------------------------------------------- new and rename


class TestNewPlaybook:
    def test_the_list_offers_new_playbook_to_editors_only(self, client, erin, bob, standard):
        client.force_login(erin)
        assert 'id="new-playbook"' in client.get(reverse("playbooks")).content.decode()
        client.force_login(bob)
        assert 'id="new-playbook"' not in client.get(reverse("playbooks")).content.decode()

    def test_an_empty_playbook_is_a_draft_with_one_category(self, client, erin, standard):
        client.force_login(erin)
        response = client.post(reverse("playbook-new"), {"name": "Returns desk", "start": ""})
        version = PlaybookVersion.objects.get(playbook__name="Returns desk")
        assert response["Location"] == reverse("playbook-version", args=[version.pk])
        assert (version.number, version.status, version.created_by) == (1, VersionStatus.DRAFT, erin)
        spec = version_spec(version)
        assert [c.name for c in spec.categories] == ["other"] and spec.rules == [] and spec.articles == []

    def test_a_copy_takes_every_part_of_the_version_under_the_new_name(self, client, erin, standard):
        client.force_login(erin)
        client.post(reverse("playbook-new"), {"name": "Standard (EU)", "start": str(standard.pk)})
        copy = PlaybookVersion.objects.get(playbook__name="Standard (EU)")
        original = version_spec(standard).model_dump(mode="json")
        assert version_spec(copy).model_dump(mode="json") == {**original, "name": "Standard (EU)"}
        assert copy.articles.count() == standard.articles.count() > 0
        assert Playbook.objects.get(pk=standard.playbook_id).name == "Standard"  # the original is untouched

    @pytest.mark.parametrize("name, expected", [("Standard", "a playbook named &#x27;Standard&#x27; exists"),
                                                ("", "This field is required.")])
    def test_a_name_taken_or_empty_creates_nothing(self, client, erin, standard, name, expected):
        client.force_login(erin)
        response = client.post(reverse("playbook-new"), {"name": name, "start": ""})
        assert response.status_code == 400 and expected in response.content.decode()
        assert "No playbook was created." in response.content.decode()
        assert Playbook.objects.count() == 1 and PlaybookVersion.objects.count() == 1

    def test_viewers_and_operators_may_not(self, client, bob, alice, standard):
        for user in (bob, alice):
            client.force_login(user)
            assert client.get(reverse("playbook-new")).status_code == 403
            assert client.post(reverse("playbook-new"), {"name": "Mine"}).status_code == 403
        assert Playbook.objects.count() == 1


class TestRename:
    def test_a_rename_changes_the_playbook_and_its_draft_not_the_published_versions(self, client, erin, standard):
        draft = draft_open(playbook_id=standard.playbook_id, user=erin)
        client.force_login(erin)
        response = client.post(reverse("playbook-rename", args=[standard.playbook_id]), {"name": "  Acme  support "})
        assert response["Location"] == reverse("playbook", args=[standard.playbook_id]) + "?renamed=1"
        assert Playbook.objects.get(pk=standard.playbook_id).name == "Acme support"
        assert version_spec(PlaybookVersion.objects.get(pk=draft.pk)).name == "Acme support"
        assert version_spec(standard).name == "Standard"  # frozen, with the hash it was published with
        assert "Renamed." in client.get(response["Location"]).content.decode()

    def test_a_name_taken_changes_nothing(self, client, erin, standard):
        playbook_services.playbook_new(name="Other")
        client.force_login(erin)
        response = client.post(reverse("playbook-rename", args=[standard.playbook_id]), {"name": "Other"})
        assert response.status_code == 400 and "The name was not changed." in response.content.decode()
        assert Playbook.objects.get(pk=standard.playbook_id).name == "Standard"

    def test_viewers_and_operators_may_not(self, client, bob, alice, standard):
        for user in (bob, alice):
            client.force_login(user)
            assert client.post(reverse("playbook-rename", args=[standard.playbook_id]), {"name": "X"}).status_code == 403
        assert Playbook.objects.get(pk=standard.playbook_id).name == "Standard"


# --------------------------------------------------------------------------- the whole draft as YAML


@pytest.fixture
def draft(standard, erin):
    return draft_open(playbook_id=standard.playbook_id, user=erin)


def post_yaml(client, version, text, **kwargs):
    return client.post(reverse("playbook-yaml", args=[version.pk]), {"yaml-text": text}, **kwargs)


class TestYaml:
    def test_the_draft_page_holds_the_draft_as_yaml(self, client, erin, draft):
        client.force_login(erin)
        body = client.get(reverse("playbook-version", args=[draft.pk])).content.decode()
        assert 'id="yaml-form"' in body and "name: Standard" in body

    def test_a_yaml_save_replaces_every_section_at_once(self, client, erin, draft):
        text = spec_to_yaml(version_spec(draft))
        text = text.replace("rules: []", "rules:\n- name: Never close billing\n  when: [category is billing]\n"
                                         "  forbid: [close_ticket]")
        text = text.replace("- name: feedback", "- name: praise")
        client.force_login(erin)
        response = post_yaml(client, draft, text)
        assert response.status_code == 302
        spec = version_spec(PlaybookVersion.objects.get(pk=draft.pk))
        assert [r.name for r in spec.rules] == ["Never close billing"]
        assert "praise" in [c.name for c in spec.categories] and "feedback" not in [c.name for c in spec.categories]

    def test_each_error_names_its_line_and_nothing_is_written(self, client, erin, draft):
        lines = spec_to_yaml(version_spec(draft)).splitlines()
        at = lines.index("- name: account") if "- name: account" in lines else lines.index("  - name: account")
        lines[at] = lines[at].replace("account", "billing")  # a duplicate category name
        text = "\n".join(lines).replace("rules: []", "rules:\n- name: By plan\n  when:\n  - category is billing\n"
                                                     "  - plan is pro\n  forbid: [close_ticket]")
        before = rows_of(draft)
        client.force_login(erin)
        response = post_yaml(client, draft, text)
        body = response.content.decode()
        assert response.status_code == 400 and "Nothing was saved." in body
        assert f"line {at + 1}: categories[1].name: duplicate category name &#x27;billing&#x27;" in body
        plan_line = text.splitlines().index("  - plan is pro") + 1
        assert f"line {plan_line}: rules[0].when[1]: unknown field &#x27;plan&#x27;" in body
        assert "plan is pro" in body  # the text comes back as typed
        assert rows_of(draft) == before

    def test_broken_yaml_names_its_line_and_column(self, client, erin, draft):
        before = rows_of(draft)
        client.force_login(erin)
        response = post_yaml(client, draft, "name: Standard\ncategories:\n  - name: [billing\n")
        body = response.content.decode()
        assert response.status_code == 400 and "YAML: not valid YAML or JSON (line 4, column 1)" in body
        assert rows_of(draft) == before

    def test_a_name_given_in_yaml_renames_the_playbook(self, client, erin, draft):
        text = spec_to_yaml(version_spec(draft)).replace("name: Standard\n", "name: Standard 2\n", 1)
        client.force_login(erin)
        assert post_yaml(client, draft, text).status_code == 302
        assert Playbook.objects.get(pk=draft.playbook_id).name == "Standard 2"


# --------------------------------------------------------------------------- confirm publish and discard


class TestConfirm:
    def test_publish_shows_what_changes_before_anything_is_published(self, client, erin, draft):
        spec = version_spec(draft)
        draft_update(version_id=draft.pk, changes={"guidance": {**spec.guidance.model_dump(), "tone": "Be brief."}})
        client.force_login(erin)
        response = client.get(reverse("playbook-publish", args=[draft.pk]))
        body = response.content.decode()
        assert response.status_code == 200 and "Publish Standard v2?" in body
        assert "<code>guidance.tone</code>" in body and "Be brief." in body and 'id="confirm-publish"' in body
        assert 'id="no-regression"' in body  # no labelled rehearsal yet
        assert PlaybookVersion.objects.get(pk=draft.pk).status == VersionStatus.DRAFT
        assert client.post(reverse("playbook-publish", args=[draft.pk])).status_code == 302
        assert PlaybookVersion.objects.get(pk=draft.pk).status == VersionStatus.PUBLISHED

    def test_discard_shows_what_is_thrown_away_and_keeps_the_draft_until_confirmed(self, client, erin, draft):
        draft_update(version_id=draft.pk, changes={"rules": [{"name": "Hold closes", "when": ["priority is urgent"],
                                                              "approve": ["close_ticket"]}]})
        client.force_login(erin)
        body = client.get(reverse("playbook-discard", args=[draft.pk])).content.decode()
        assert "Discard the draft Standard v2?" in body and "rules[Hold closes].approve" in body
        assert PlaybookVersion.objects.filter(pk=draft.pk).exists()
        client.post(reverse("playbook-discard", args=[draft.pk]))
        assert not PlaybookVersion.objects.filter(pk=draft.pk).exists()

    def test_the_page_buttons_lead_to_the_confirmations(self, client, erin, draft):
        client.force_login(erin)
        body = client.get(reverse("playbook-version", args=[draft.pk])).content.decode()
        assert f'href="{reverse("playbook-publish", args=[draft.pk])}" id="publish-button"' in body
        assert f'href="{reverse("playbook-discard", args=[draft.pk])}" id="discard-button"' in body

    def test_a_publish_error_is_listed_and_publishing_is_refused(self, client, erin, draft, monkeypatch):
        monkeypatch.setattr(playbook_services, "publish_errors",
                            lambda version, spec, fits=None: ["prompts: the triage prompt needs 9000 tokens; the model reads 8192"])
        client.force_login(erin)
        body = client.get(reverse("playbook-publish", args=[draft.pk])).content.decode()
        assert 'id="publish-errors"' in body and "the model reads 8192" in body and "confirm-publish" not in body
        response = client.post(reverse("playbook-publish", args=[draft.pk]))
        assert response.status_code == 400 and "the model reads 8192" in response.content.decode()
        assert PlaybookVersion.objects.get(pk=draft.pk).status == VersionStatus.DRAFT

    def test_viewers_and_operators_get_no_confirmation(self, client, bob, alice, draft):
        for user in (bob, alice):
            client.force_login(user)
            for name in ("playbook-publish", "playbook-discard"):
                assert client.get(reverse(name, args=[draft.pk])).status_code == 403


# --------------------------------------------------------------------------- the regression


LABELLED = [("G-1", "I want a refund for my invoice", "billing"),
            ("G-2", "I forgot my password", "account"),
            ("G-3", "My parcel never arrived", "shipping"),
            ("G-4", "Thank you, great service", "feedback")]


def labelled_rehearsal(version, *, model_label=OfflineModel.label) -> Task:
    """A labelled rehearsal on `version` decided by the offline model, as its worker would have left it."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["ticket_id", "customer_email", "subject", "body", "expected_category"])
    for ticket, text, category in LABELLED:
        writer.writerow([ticket, f"{ticket.lower()}@example.com", text, f"{text}.", category])
    task = task_upload(data=out.getvalue().encode(), filename="labelled.csv", name="Labelled", rehearsal=True,
                       playbook_version=version)
    spec = version_spec(version)
    for item in task.items.order_by("row"):
        outputs = {}
        for step in ("triage", "draft", "decide"):
            outputs[step] = run_model_step(OfflineModel(), step, item, outputs, spec=spec, version_id=version.pk)[0]
        Checkpoint.objects.create(item=item, task_id=task.pk, plan_version=PLAN_VERSION,
                                  playbook_version_id=version.pk, schema_version=SCHEMA_VERSION, cursor=3,
                                  input_hash=item.input_hash(), step_outputs=outputs)
    task.items.update(status=ItemStatus.DONE, finished_at=timezone.now())
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.COMPLETED, model_label=model_label)
    return task


def regression_draft(draft):
    """The draft: shipping loses its keyword "parcel*", and a rule forbids billing replies."""
    spec = version_spec(draft).model_dump(mode="json")
    for category in spec["categories"]:
        if category["name"] == "shipping":
            category["keywords"] = [k for k in category["keywords"] if k.rstrip("*") != "parcel"]
    rules = [{"name": "No billing replies", "when": ["category is billing"], "forbid": ["notify_customer"]}]
    return draft_update(version_id=draft.pk, changes={"categories": spec["categories"], "rules": rules})


def counts() -> tuple:
    return Task.objects.count(), Item.objects.count(), Event.objects.count(), Checkpoint.objects.count()


class TestRegression:
    def test_the_last_labelled_rehearsal_is_decided_again_under_the_draft(self, client, erin, standard, draft):
        task = labelled_rehearsal(standard)
        regression_draft(draft)
        before = counts()
        client.force_login(erin)
        response = client.get(reverse("playbook-publish", args=[draft.pk]))
        regression = response.context["regression"]
        assert regression.rehearsal == task and regression.mode == "full" and regression.tickets == 4
        changed = {c.ticket_id: c for c in regression.changes}
        assert sorted(changed) == ["G-1", "G-3"]
        assert (changed["G-3"].before.category, changed["G-3"].after.category) == ("shipping", "other")
        assert changed["G-1"].changed == ("actions",) and changed["G-1"].actions_removed == ["notify_customer"]
        [(name, was, now)] = regression.agreement
        assert (name, was.agree, was.n, now.agree, now.n) == ("category", 4, 4, 3, 4)
        body = response.content.decode()
        assert f'<a href="{reverse("rehearsal", args=[task.pk])}">Rehearsal {task.pk}</a>' in body
        assert "shipping → <b>other</b>" in body and "− notify_customer" in body
        assert "4 of 4 (<b>100%</b>)" in body and "3 of 4 (<b>75%</b>)" in body
        assert "the offline model decided every ticket again" in body
        assert counts() == before, "nothing is written: no task, item, event or checkpoint"

    def test_with_another_model_its_answers_are_kept_and_the_rules_applied_again(self, client, erin, standard, draft):
        labelled_rehearsal(standard, model_label="OpenAI model gpt-test")
        regression_draft(draft)
        client.force_login(erin)
        regression = client.get(reverse("playbook-publish", args=[draft.pk])).context["regression"]
        assert regression.mode == "rules"
        assert [(c.ticket_id, c.changed) for c in regression.changes] == [("G-1", ("actions",))]  # triage kept
        assert "the model&#x27;s rehearsed answers were kept" in client.get(
            reverse("playbook-publish", args=[draft.pk])).content.decode()

    def test_an_unchanged_draft_changes_no_ticket(self, client, erin, standard, draft):
        labelled_rehearsal(standard)
        client.force_login(erin)
        regression = client.get(reverse("playbook-publish", args=[draft.pk])).context["regression"]
        assert regression.changes == [] and regression.tickets == 4
