"""The transition log carries the effect's row after each change (one audit record per change)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("ledger", "0004_call_evidence")]

    operations = [
        migrations.AddField(
            model_name="effecttransition",
            name="snapshot",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
