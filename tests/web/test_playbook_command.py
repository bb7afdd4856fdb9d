"""`manage.py playbook export|import`: files round-trip to the same hash; a bad file names every error and changes nothing."""

import io

import pytest
import yaml
from django.core.management import CommandError, call_command

from ticketagent.playbooks.models import Article, Playbook, PlaybookVersion, VersionStatus
from ticketagent.playbooks.services import draft_open, draft_update, version_default, version_spec

pytestmark = [pytest.mark.django_db]

ACME = "docs/examples/playbook-acme.yaml"


def run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("playbook", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def refused(*args) -> tuple[str, str]:
    """The command's error line and what it printed before it."""
    err = io.StringIO()
    with pytest.raises(CommandError) as exc:
        call_command("playbook", *args, stdout=io.StringIO(), stderr=err)
    return str(exc.value), err.getvalue()


def acme() -> dict:
    with open(ACME, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def written(tmp_path, data: dict, name="playbook.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return str(path)


def nothing_saved() -> bool:
    return not Playbook.objects.exists() and not PlaybookVersion.objects.exists() and not Article.objects.exists()


class TestRoundTrip:
    def test_import_export_import_gives_the_same_content_hash(self, tmp_path, alice):
        out, _ = run("import", ACME, "--publish", "--user", "alice")
        first = PlaybookVersion.objects.get(playbook__name="Acme Cloud support")
        assert first.status == VersionStatus.PUBLISHED and first.published_by == alice
        assert first.content_hash[:12] in out
        spec = version_spec(first).model_dump()
        exported = tmp_path / "acme-v1.yaml"
        run("export", "Acme Cloud support", "-o", str(exported))
        # the exported file, imported where no playbook exists, is the same playbook to the byte
        PlaybookVersion.objects.all().delete()
        Playbook.objects.all().delete()
        run("import", str(exported), "--publish")
        again = PlaybookVersion.objects.get(playbook__name="Acme Cloud support")
        assert again.content_hash == first.content_hash
        assert version_spec(again).model_dump() == spec

    def test_a_file_of_an_existing_playbook_becomes_its_next_version(self, tmp_path):
        run("import", ACME, "--publish")
        exported = tmp_path / "acme.yaml"
        run("export", "Acme Cloud support:1", "-o", str(exported))
        run("import", str(exported), "--publish")
        first, second = PlaybookVersion.objects.filter(playbook__name="Acme Cloud support").order_by("number")
        assert second.number == 2 and second.content_hash == first.content_hash

    def test_export_writes_yaml_to_stdout(self):
        version = version_default()
        out, _ = run("export", "Standard")
        assert yaml.safe_load(out) == version_spec(version).model_dump(mode="json")
        out, _ = run("export", "Standard:1")
        assert yaml.safe_load(out)["name"] == "Standard"

    def test_export_of_the_draft_needs_draft(self, erin_like):
        published = version_default()
        draft = draft_open(playbook_id=published.playbook_id, user=erin_like)
        guidance = {**version_spec(published).guidance.model_dump(), "tone": "Short."}
        draft_update(version_id=draft.pk, changes={"guidance": guidance})
        assert yaml.safe_load(run("export", "Standard")[0])["guidance"]["tone"] != "Short."
        assert yaml.safe_load(run("export", "Standard", "--draft")[0])["guidance"]["tone"] == "Short."
        message, _ = refused("export", "Standard:2")
        assert "has no published version 2" in message

    def test_unknown_names_versions_and_users_are_refused(self, tmp_path):
        version_default()
        assert "no playbook named 'Nope'" in refused("export", "Nope")[0]
        assert "no published version 9" in refused("export", "Standard:9")[0]
        assert "has no open draft" in refused("export", "Standard", "--draft")[0]
        message, _ = refused("import", ACME, "--user", "nobody")
        assert "no user named 'nobody'" in message
        assert not Playbook.objects.filter(name="Acme Cloud support").exists()


@pytest.fixture
def erin_like(db):
    from django.contrib.auth.models import Group, User

    user = User.objects.create_user("erin", password="erin-pass-123")
    user.groups.add(Group.objects.get_or_create(name="editors")[0])
    return user


def _duplicate_category(data):
    data["categories"][3]["name"] = "billing"
    return "categories[3].name: duplicate category name 'billing'"


def _unknown_action(data):
    data["rules"][1]["require"] = ["refund_everyone"]
    return "rules[1].require[0]: Input should be 'save_draft', 'notify_customer', 'set_status', 'close_ticket' or " \
           "'escalate'"


def _unknown_condition_field(data):
    data["rules"][0]["when"] = ["plan is enterprise"]
    return "rules[0].when[0]: unknown field 'plan'"


def _no_categories(data):
    data["categories"] = []
    data["rules"] = []
    return "categories: List should have at least 1 item after validation, not 0"


def _oversized_article(data):
    data["articles"][2]["body"] = "x" * 5001
    return "articles[2].body: String should have at most 5000 characters"


def _unknown_placeholder(data):
    data["guidance"]["policies"] += "\nThe customer's plan is {{plan}}."
    return "guidance.policies: unknown placeholder {{plan}}"


BAD_FILES = [_duplicate_category, _unknown_action, _unknown_condition_field, _no_categories, _oversized_article,
             _unknown_placeholder]


@pytest.mark.parametrize("spoil", BAD_FILES, ids=lambda f: f.__name__.strip("_"))
def test_a_bad_file_names_its_error_and_changes_nothing(spoil, tmp_path):
    data = acme()
    expected = spoil(data)
    path = written(tmp_path, data)
    message, printed = refused("import", path, "--publish")
    assert message.endswith("nothing was changed") and path in message
    lines = printed.splitlines()
    assert any(line.startswith(expected) for line in lines), printed
    assert nothing_saved()


def test_every_error_of_a_file_is_printed_on_a_line_of_its_own(tmp_path):
    data = acme()
    expected = [spoil(data) for spoil in (_duplicate_category, _unknown_condition_field, _oversized_article,
                                          _unknown_placeholder)]
    message, printed = refused("import", written(tmp_path, data))
    for line in expected:
        assert any(printed_line.startswith(line) for printed_line in printed.splitlines()), (line, printed)
    assert f"{len(printed.splitlines())} error(s); nothing was changed" in message
    assert nothing_saved()


def test_a_file_that_is_not_yaml_changes_nothing(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n", encoding="utf-8")
    message, printed = refused("import", str(path))
    assert "not valid YAML or JSON (line" in printed and "nothing was changed" in message
    assert "cannot be read" in refused("import", str(tmp_path / "missing.yaml"))[1]
    assert nothing_saved()


def test_a_bad_file_leaves_an_existing_playbook_as_it_was(tmp_path):
    version = version_default()
    before = version_spec(version).model_dump()
    data = {**version_spec(version).model_dump(mode="json"), "categories": []}
    refused("import", written(tmp_path, data), "--publish")
    assert list(PlaybookVersion.objects.values_list("number", "status")) == [(1, "published")]
    assert version_spec(PlaybookVersion.objects.get(pk=version.pk)).model_dump() == before
