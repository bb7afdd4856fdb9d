"""`manage.py playbook export|import`: a playbook version as a YAML file, and a file as a playbook's draft or version.

    manage.py playbook export NAME[:N] [-o FILE] [--draft]
    manage.py playbook import FILE [--publish] [--user NAME]

Export writes the latest published version (or version N, or with
`--draft` the open draft) as YAML, to stdout or FILE. Import checks the
whole file first, with the editor's words: every error is printed on a
line of its own, naming its field, and nothing is changed.
"""

from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from ticketagent.llm.clients import publish_fit
from ticketagent.playbooks.files import spec_from_file, spec_to_yaml
from ticketagent.playbooks.models import Playbook, PlaybookVersion, VersionStatus
from ticketagent.playbooks.services import playbook_import, version_named, version_spec
from ticketagent.playbooks.spec import PlaybookInvalid
from ticketagent.services import ServiceError


class Command(BaseCommand):
    help = "Export a playbook version as YAML, or import a playbook file (the same checks as the editor)."

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="action", required=True, metavar="{export,import}")
        export = commands.add_parser("export", help="write a version as YAML (the latest published by default)")
        export.add_argument("name", metavar="NAME[:N]", help="the playbook's name, with :N for version N")
        export.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
        export.add_argument("--draft", action="store_true", help="export the playbook's open draft")
        load = commands.add_parser("import", help="a YAML or JSON file as a playbook's draft (or a new version)")
        load.add_argument("file", metavar="FILE")
        load.add_argument("--publish", action="store_true", help="publish it at once (otherwise it stays a draft)")
        load.add_argument("--user", metavar="NAME", help="who imports (and publishes) it, by user name")

    def handle(self, *args, action, **options):
        if action == "export":
            self.export(options["name"], output=options.get("output"), draft=options.get("draft", False))
        else:
            self.load(Path(options["file"]), publish=options.get("publish", False), username=options.get("user"))

    def export(self, name: str, *, output: str | None, draft: bool) -> None:
        version = _draft_named(name) if draft else _published_named(name)
        text = spec_to_yaml(version_spec(version))
        if not output:
            self.stdout.write(text, ending="")
            return
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"{output}: cannot be written: {exc}") from None
        self.stdout.write(f"{version.label}{' (draft)' if version.is_draft else ''} written to {output}")

    def load(self, path: Path, *, publish: bool, username: str | None) -> None:
        user = _user_named(username) if username else None
        try:
            version = playbook_import(data=spec_from_file(path), user=user, publish=publish,
                                      fits=publish_fit() if publish else None)
        except PlaybookInvalid as exc:
            for error in exc.errors:
                self.stderr.write(error)
            raise CommandError(f"{path}: {len(exc.errors)} error(s); nothing was changed") from None
        except ServiceError as exc:
            raise CommandError(f"{path}: {exc}; nothing was changed") from None
        if version.is_draft:
            self.stdout.write(self.style.SUCCESS(f"{version.label} is a draft: read it and publish it in the "
                                                 f"browser, or import again with --publish"))
        else:
            self.stdout.write(self.style.SUCCESS(f"{version.label} published (sha256 {version.content_hash[:12]})"))


def _published_named(name: str) -> PlaybookVersion:
    try:
        return version_named(name)
    except ServiceError as exc:
        raise CommandError(str(exc)) from None


def _draft_named(name: str) -> PlaybookVersion:
    playbook = Playbook.objects.filter(name=name.strip()).first()
    if playbook is None:
        raise CommandError(f"no playbook named {name.strip()!r} (--draft takes the name alone, without :N)")
    draft = playbook.versions.filter(status=VersionStatus.DRAFT).first()
    if draft is None:
        raise CommandError(f"{playbook.name!r} has no open draft")
    return draft


def _user_named(username: str):
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise CommandError(f"no user named {username!r}; nothing was changed")
    return user
