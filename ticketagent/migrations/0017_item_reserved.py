from django.db import migrations, models


class Migration(migrations.Migration):
    """What an item's model calls in flight reserved of its task's budget (a reservation counts while its lease
    is live)."""

    dependencies = [
        ('ticketagent', '0016_task_helpdesk'),
    ]

    operations = [
        migrations.AddField(
            model_name='item',
            name='reserved_usd',
            field=models.DecimalField(decimal_places=9, default=0, max_digits=20),
        ),
        migrations.AddField(
            model_name='item',
            name='reserved_tokens',
            field=models.BigIntegerField(default=0),
        ),
    ]
