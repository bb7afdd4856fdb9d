"""An index for "recently resolved effects" (the review page's audit trail).

`Effect.objects.exclude(resolved_by="").order_by("-updated_at")[:30]` read the
whole ledger and sorted it: ~130 ms at 300k effects (docs/benchmarks.md, "Profiling").
With this partial index it reads the 30 rows it shows.

Plain SQL on purpose (both PostgreSQL and SQLite accept it) and invisible to
the migration state, so `makemigrations` does not propose to drop it; if it
moves into `Effect.Meta.indexes` one day, replace this with AddIndex.
"""

from django.db import migrations

INDEX = "ledger_effect_resolved_recent_idx"


class Migration(migrations.Migration):
    dependencies = [("ledger", "0001_initial")]

    operations = [
        migrations.RunSQL(
            sql=f"CREATE INDEX IF NOT EXISTS {INDEX} ON ledger_effect (updated_at) WHERE resolved_by <> ''",
            reverse_sql=f"DROP INDEX IF EXISTS {INDEX}",
        ),
    ]
