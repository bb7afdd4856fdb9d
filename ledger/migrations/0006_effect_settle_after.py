"""An unknown effect's settle time: when "not found" can be trusted (PostgreSQL's clock)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("ledger", "0005_transition_snapshot")]

    operations = [
        migrations.AddField(
            model_name="effect",
            name="settle_after",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
