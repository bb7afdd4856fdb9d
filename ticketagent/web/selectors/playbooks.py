"""The playbook pages' reads: playbooks with their versions, the versions a diff compares, its rows as text."""

from dataclasses import dataclass

from django.db.models import Prefetch, QuerySet
from django.http import Http404
from django.utils.text import slugify

from ticketagent.playbooks.diff import specs_diff
from ticketagent.playbooks.models import Playbook, PlaybookVersion, VersionStatus
from ticketagent.playbooks.services import version_spec

HASH_SHOWN = 12


def _versions() -> QuerySet:
    return PlaybookVersion.objects.select_related("published_by", "created_by").order_by("-number")


def playbooks_with_versions(pk: int | None = None) -> list[Playbook]:
    """Every playbook (or the one of `pk`), each with its versions (newest first), who published them, and
    its open draft (`draft`, None when it has none)."""
    playbooks = Playbook.objects.order_by("name").prefetch_related(Prefetch("versions", queryset=_versions()))
    playbooks = list(playbooks if pk is None else playbooks.filter(pk=pk))
    for playbook in playbooks:
        playbook.draft = next((v for v in playbook.versions.all() if v.is_draft), None)
    return playbooks


def playbook_with_versions(pk: int) -> Playbook:
    found = playbooks_with_versions(pk)
    if not found:
        raise Http404("no such playbook")
    return found[0]


def playbook_draft(playbook: Playbook) -> PlaybookVersion | None:
    return playbook.versions.filter(status=VersionStatus.DRAFT).first()


def version_or_404(pk: int) -> PlaybookVersion:
    version = PlaybookVersion.objects.select_related("playbook", "published_by", "created_by", "based_on").filter(
        pk=pk).first()
    if version is None:
        raise Http404("no such playbook version")
    return version


def version_file_name(version: PlaybookVersion) -> str:
    """acme-cloud-support-v3.yaml (…-v4-draft.yaml for a draft)."""
    draft = "-draft" if version.is_draft else ""
    return f"{slugify(version.playbook.name) or 'playbook'}-v{version.number}{draft}.yaml"


def diff_pair(playbook: Playbook, a: str | None, b: str | None) -> tuple[PlaybookVersion, PlaybookVersion]:
    """The versions to compare, by number: as asked, else the newest and the one it was made from."""
    versions = {v.number: v for v in playbook.versions.all()}
    after = _numbered(versions, b) if b else versions[max(versions)]
    if a:
        return _numbered(versions, a), after
    by_pk = {v.pk: v for v in versions.values()}
    return by_pk.get(after.based_on_id) or versions.get(after.number - 1) or after, after


def _numbered(versions: dict, number: str) -> PlaybookVersion:
    version = versions.get(int(number)) if str(number).isdigit() else None
    if version is None:
        raise Http404(f"this playbook has no version {number}")
    return version


@dataclass(frozen=True)
class DiffRow:
    field: str
    before: str
    after: str
    kind: str


def shown(value) -> str:
    """A field's value as text: lists comma-separated, yes/no, "" for a field that is not there."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "(none)"
    return str(value) if value != "" else "(empty)"


def version_diff(before: PlaybookVersion, after: PlaybookVersion) -> list[DiffRow]:
    """What changed from `before` to `after`, field by field."""
    return [DiffRow(change.field, shown(change.before), shown(change.after), change.kind)
            for change in specs_diff(version_spec(before), version_spec(after))]


def draft_base(draft: PlaybookVersion) -> PlaybookVersion | None:
    """What a draft is measured against before it is published or discarded: the latest published version
    of its playbook (what new tasks run on now); None for a playbook never published."""
    return (PlaybookVersion.objects.filter(playbook_id=draft.playbook_id, status=VersionStatus.PUBLISHED)
            .select_related("playbook").order_by("-number").first())


def start_choices() -> list[PlaybookVersion]:
    """The versions a new playbook may start as a copy of: every playbook's versions, newest first."""
    return list(PlaybookVersion.objects.select_related("playbook").order_by("playbook__name", "-number"))
