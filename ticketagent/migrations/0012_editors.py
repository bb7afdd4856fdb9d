"""A third role: editors change playbooks (draft, edit, publish); operators and viewers read them."""

from django.db import migrations


def create_role(apps, schema_editor):
    apps.get_model("auth", "Group").objects.get_or_create(name="editors")


class Migration(migrations.Migration):
    dependencies = [("ticketagent", "0011_playbook_version_required"), ("auth", "0012_alter_user_first_name_max_length")]
    operations = [migrations.RunPython(create_role, migrations.RunPython.noop)]
