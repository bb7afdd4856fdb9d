from django.db import migrations, models


class Migration(migrations.Migration):
    """One word per concept: the caller's `lease_token` (was `holder`), and a
    `verdict` on an unknown effect (was `decision`, which is the model's)."""

    dependencies = [("ledger", "0002_effect_resolved_recent_idx")]

    operations = [
        migrations.RenameField("effect", "holder", "lease_token"),
        migrations.RenameField("blockedduplicate", "holder", "lease_token"),
        migrations.RenameField("effect", "decision", "verdict"),
        migrations.RenameField("effect", "decided_by", "reviewed_by"),
        migrations.RenameField("effect", "decision_reason", "review_reason"),
        migrations.RenameField("effect", "decided_at", "reviewed_at"),
    ]
