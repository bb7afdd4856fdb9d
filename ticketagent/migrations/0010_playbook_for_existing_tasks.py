"""Tasks created before playbooks run on the shipped playbook ("Standard" v1, ticketagent/playbooks/standard.yaml)."""

import hashlib
import json
from pathlib import Path

import yaml
from django.db import migrations

STANDARD = Path(__file__).resolve().parent.parent / "playbooks" / "standard.yaml"


def forwards(apps, schema_editor):
    Task = apps.get_model("ticketagent", "Task")
    if not Task.objects.exists():
        return  # a new installation: the shipped playbook is published when the first task needs it
    Playbook = apps.get_model("ticketagent", "Playbook")
    Version = apps.get_model("ticketagent", "PlaybookVersion")
    Article = apps.get_model("ticketagent", "Article")
    from ticketagent.playbooks.spec import spec_validate

    spec = spec_validate(yaml.safe_load(STANDARD.read_text(encoding="utf-8")))
    whole = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    playbook = Playbook.objects.create(name=spec.name)
    version = Version.objects.create(playbook=playbook, number=1, status="published", format=spec.format,
                                     content=spec.model_dump(mode="json", exclude={"articles"}),
                                     content_hash=hashlib.sha256(whole.encode()).hexdigest())
    for i, a in enumerate(spec.articles):
        Article.objects.create(version=version, position=i, title=a.title, body=a.body, tags=a.tags,
                               enabled=a.enabled)
    Task.objects.update(playbook_version=version)
    apps.get_model("ticketagent", "Item").objects.update(playbook_version=version)
    apps.get_model("ticketagent", "Checkpoint").objects.update(playbook_version=version)


class Migration(migrations.Migration):
    dependencies = [("ticketagent", "0009_playbooks")]
    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
