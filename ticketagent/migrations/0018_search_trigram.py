import django.contrib.postgres.indexes
import django.db.models.functions.text
from django.contrib.postgres.operations import AddIndexConcurrently, TrigramExtension
from django.db import migrations


class Migration(migrations.Migration):
    """Search by any part of a ticket id, a customer email (a domain) or a subject: pg_trgm (a trusted extension
    since PostgreSQL 13: the database's owner may create it) and a trigram index on each, built without blocking
    the workers' writes."""

    atomic = False  # CREATE INDEX CONCURRENTLY runs outside a transaction

    dependencies = [
        ('ticketagent', '0017_item_reserved'),
    ]

    operations = [
        TrigramExtension(),
        AddIndexConcurrently(
            model_name='item',
            index=django.contrib.postgres.indexes.GinIndex(django.contrib.postgres.indexes.OpClass(django.db.models.functions.text.Upper('ticket_id'), name='gin_trgm_ops'), name='item_ticket_trgm_idx'),
        ),
        AddIndexConcurrently(
            model_name='item',
            index=django.contrib.postgres.indexes.GinIndex(django.contrib.postgres.indexes.OpClass(django.db.models.functions.text.Upper('customer_email'), name='gin_trgm_ops'), name='item_email_trgm_idx'),
        ),
        AddIndexConcurrently(
            model_name='item',
            index=django.contrib.postgres.indexes.GinIndex(django.contrib.postgres.indexes.OpClass(django.db.models.functions.text.Upper('subject'), name='gin_trgm_ops'), name='item_subject_trgm_idx'),
        ),
    ]
