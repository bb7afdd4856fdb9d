"""What editors do to playbooks: create, open a draft, change it, publish it, import and export it.

A version's spec is validated whole before anything is written; a change
that does not validate writes nothing (`PlaybookInvalid` lists every error
with its field). A published version is frozen: every write here locks the
version and refuses one that is not a draft.
"""

from collections.abc import Callable

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from ticketagent.errors import ServiceError
from ticketagent.playbooks.models import Article, Playbook, PlaybookVersion, VersionStatus
from ticketagent.playbooks.search import article_vectors_refresh
from ticketagent.playbooks.spec import PlaybookInvalid, PlaybookSpec, spec_validate
from ticketagent.playbooks.standard import standard_spec

SECTIONS = ("name", "guidance", "categories", "facts", "words", "rules", "reply", "checks", "articles")


def version_spec(version: PlaybookVersion) -> PlaybookSpec:
    """The whole spec of a version: its content and its articles."""
    articles = [{"title": a.title, "body": a.body, "tags": list(a.tags), "enabled": a.enabled}
                for a in version.articles.order_by("position", "id")]
    return PlaybookSpec.model_validate({**version.content, "articles": articles})


_PUBLISHED: dict[tuple[int, str], PlaybookSpec] = {}


def published_spec(version: PlaybookVersion) -> PlaybookSpec:
    """A published version's spec, read once per process: it never changes (its hash says which it is)."""
    if version.is_draft:
        raise ServiceError(f"{version.label} is a draft: tasks run on published versions only")
    key = (version.pk, version.content_hash)
    spec = _PUBLISHED.get(key)
    if spec is None:
        if len(_PUBLISHED) > 100:
            _PUBLISHED.clear()
        spec = _PUBLISHED[key] = version_spec(version)
    return spec


def _write(version: PlaybookVersion, spec: PlaybookSpec, *, articles: bool) -> None:
    """Inside a transaction holding the draft: its content, and (when they changed) its articles."""
    version.content = spec.model_dump(mode="json", exclude={"articles"})
    version.format = spec.format
    version.save(update_fields=["content", "format", "updated_at"])
    if articles:
        version.articles.all().delete()
        Article.objects.bulk_create([Article(version=version, position=i, title=a.title, body=a.body,
                                             tags=a.tags, enabled=a.enabled) for i, a in enumerate(spec.articles)])
        article_vectors_refresh(version_id=version.pk)


def _draft_locked(version_id: int) -> PlaybookVersion:
    version = PlaybookVersion.objects.select_for_update().filter(pk=version_id).first()
    if version is None:
        raise ServiceError("no such playbook version")
    version_require_draft(version)
    return version


def version_require_draft(version: PlaybookVersion) -> None:
    """ServiceError unless `version` is a draft: a published version is frozen. A page checks it before
    reading a form; every write checks it again under the version's lock."""
    if not version.is_draft:
        raise ServiceError(f"{version.label} is published and cannot change: open a draft to edit it")


def empty_spec(name: str) -> dict:
    """A new playbook with nothing in it yet: no guidance, no rules, no articles, and the one category every
    playbook needs (`other`)."""
    return {"name": name, "categories": [{"name": "other", "description": "Anything else."}]}


def playbook_new(*, name: str, copy_of: PlaybookVersion | None = None, user=None) -> PlaybookVersion:
    """A new playbook named `name`: empty, or a copy of version `copy_of` (any playbook's, any version) under
    the new name. Its v1 is a draft; PlaybookInvalid when the name is taken or not one."""
    data = empty_spec(name) if copy_of is None else {**version_spec(copy_of).model_dump(mode="json"), "name": name}
    return playbook_create(spec=spec_validate(data), user=user)


def playbook_rename(*, playbook_id: int, name: str) -> Playbook:
    """Give a playbook another name; its open draft takes it too. Published versions keep the name they were
    published with (their hash covers it): the next version published carries the new one."""
    name = " ".join((name or "").split())
    if not 1 <= len(name) <= 100:
        raise PlaybookInvalid(["name: 1 to 100 characters"])
    with transaction.atomic():
        playbook = Playbook.objects.select_for_update().filter(pk=playbook_id).first()
        if playbook is None:
            raise ServiceError("no such playbook")
        _rename(playbook, name)
        draft = playbook.versions.select_for_update().filter(status=VersionStatus.DRAFT).first()
        if draft is not None:
            draft.content = {**draft.content, "name": name}
            draft.save(update_fields=["content", "updated_at"])
    return playbook


def playbook_create(*, spec: PlaybookSpec, user=None) -> PlaybookVersion:
    """A new playbook with its first draft (version 1)."""
    with transaction.atomic():
        try:
            with transaction.atomic():
                playbook = Playbook.objects.create(name=spec.name)
        except IntegrityError:
            raise PlaybookInvalid([f"name: a playbook named {spec.name!r} exists already"]) from None
        version = PlaybookVersion.objects.create(playbook=playbook, number=1, created_by=user)
        _write(version, spec, articles=True)
    return version


def draft_open(*, playbook_id: int, user=None) -> PlaybookVersion:
    """The playbook's draft: the open one, or a new one copied from its latest version."""
    with transaction.atomic():
        playbook = Playbook.objects.select_for_update().get(pk=playbook_id)
        draft = playbook.versions.filter(status=VersionStatus.DRAFT).first()
        if draft is not None:
            return draft
        latest = playbook.versions.order_by("-number").first()
        number = (playbook.versions.aggregate(n=Max("number"))["n"] or 0) + 1
        draft = PlaybookVersion.objects.create(playbook=playbook, number=number, based_on=latest, created_by=user)
        _write(draft, version_spec(latest), articles=True)
    return draft


def draft_update(*, version_id: int, changes: dict, user=None) -> PlaybookVersion:
    """Change sections of a draft (`changes`: section -> its new value). The whole spec is validated
    first; nothing is written unless it passes."""
    unknown = sorted(set(changes) - set(SECTIONS))
    if unknown:
        raise PlaybookInvalid([f"{name}: not a section of a playbook" for name in unknown])
    with transaction.atomic():
        version = _draft_locked(version_id)
        current = version_spec(version).model_dump(mode="json")
        spec = spec_validate({**current, **changes})
        if spec.name != version.playbook.name:
            _rename(version.playbook, spec.name)
        _write(version, spec, articles="articles" in changes)
    return version


def _rename(playbook: Playbook, name: str) -> None:
    if Playbook.objects.filter(name=name).exclude(pk=playbook.pk).exists():
        raise PlaybookInvalid([f"name: a playbook named {name!r} exists already"])
    playbook.name = name
    playbook.save(update_fields=["name"])


def publish_errors(version: PlaybookVersion, spec: PlaybookSpec,
                   fits: Callable[[PlaybookSpec], str] | None = None) -> list[str]:
    """Why `version` (a draft whose spec validates) cannot be published, each reason a sentence; empty when it
    can. The publish confirmation lists them and offers no "Publish" while there is one; `version_publish()`
    refuses with them. `fits` says why a spec's prompts cannot fit the model's context, with the numbers
    (`llm.clients.publish_fit()`, which asks the endpoint once, before the draft is locked)."""
    problem = fits(spec) if fits else ""
    return [problem] if problem else []


def version_publish(*, version_id: int, user=None, fits: Callable[[PlaybookSpec], str] | None = None,
                    ) -> PlaybookVersion:
    """Freeze a draft: published, with the hash of its whole spec, who and when. PlaybookInvalid when its spec
    does not validate or `publish_errors()` names a reason."""
    with transaction.atomic():
        version = _draft_locked(version_id)
        spec = spec_validate(version_spec(version).model_dump(mode="json"))
        errors = publish_errors(version, spec, fits)
        if errors:
            raise PlaybookInvalid(errors)
        version.status = VersionStatus.PUBLISHED
        version.content_hash = spec.content_hash()
        version.published_by = user
        version.published_at = timezone.now()
        version.save(update_fields=["status", "content_hash", "published_by", "published_at", "updated_at"])
    return version


def draft_discard(*, version_id: int) -> None:
    """Throw a draft away (a published version cannot be)."""
    with transaction.atomic():
        version = _draft_locked(version_id)
        if version.number == 1:
            raise ServiceError("the first draft of a playbook is the playbook: nothing to go back to")
        version.delete()


def playbook_import(*, data, user=None, publish: bool = False,
                    fits: Callable[[PlaybookSpec], str] | None = None) -> PlaybookVersion:
    """A playbook file's spec (a dict) as the draft of the playbook of its name (created if new);
    published at once with `publish` (`fits` as for `version_publish`). A file that does not validate
    changes nothing."""
    spec = spec_validate(data)
    with transaction.atomic():
        playbook = Playbook.objects.filter(name=spec.name).first()
        if playbook is None:
            version = playbook_create(spec=spec, user=user)
        else:
            version = draft_open(playbook_id=playbook.pk, user=user)
            version = draft_update(version_id=version.pk, changes=spec.model_dump(mode="json", exclude={"format"}),
                                   user=user)
        if publish:
            version = version_publish(version_id=version.pk, user=user, fits=fits)
    return version


def version_latest_published(playbook: Playbook) -> PlaybookVersion | None:
    return playbook.versions.filter(status=VersionStatus.PUBLISHED).order_by("-number").first()


def version_default() -> PlaybookVersion:
    """What a new task runs on unless told otherwise: the first playbook's latest published version.
    With no playbook at all, the shipped one (`standard.yaml`) is created and published first."""
    playbook = Playbook.objects.order_by("id").first()
    if playbook is None:
        try:
            return playbook_import(data=standard_spec().model_dump(mode="json"), publish=True)
        except PlaybookInvalid:  # another process created it meanwhile (the name is unique)
            playbook = Playbook.objects.order_by("id").first()
    version = version_latest_published(playbook)
    if version is None:
        raise ServiceError(f"the playbook {playbook.name!r} has no published version yet: publish one first")
    return version


def version_named(text: str) -> PlaybookVersion:
    """"NAME" (its latest published version) or "NAME:N" (version N, published), or ServiceError."""
    name, _, number = text.rpartition(":")
    if not number.strip().isdigit() or not name:  # no version given (a name may hold a colon)
        name, number = text, ""
    playbook = Playbook.objects.filter(name=name.strip()).first()
    if playbook is None:
        raise ServiceError(f"no playbook named {name.strip()!r}")
    if not number:
        version = version_latest_published(playbook)
    else:
        version = playbook.versions.filter(number=int(number)).first()
    if version is None or version.is_draft:
        raise ServiceError(f"{name.strip()!r} has no published version {number or ''}".replace("  ", " ").strip())
    return version
