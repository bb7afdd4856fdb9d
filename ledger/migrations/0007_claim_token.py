"""The ledger names its owner's token a claim token (it knows no lease)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("ledger", "0006_effect_settle_after")]

    operations = [
        migrations.RenameField(model_name="effect", old_name="lease_token", new_name="claim_token"),
        migrations.RenameField(model_name="blockedduplicate", old_name="lease_token", new_name="claim_token"),
    ]
