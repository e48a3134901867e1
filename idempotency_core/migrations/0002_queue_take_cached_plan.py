"""`onefold_queue_take` in PL/pgSQL, whose plans PostgreSQL keeps for the connection: as
a LANGUAGE sql function it was planned again at every dequeue
(sql/0.2.0/queue_take_cached_plan.sql says why). The reverse restores the first form."""

from pathlib import Path

from django.db import migrations

SQL = Path(__file__).resolve().parent / "sql" / "0.2.0"


def sql_file(name):
    return (SQL / name).read_text(encoding="utf-8")


class Migration(migrations.Migration):
    dependencies = [("idempotency_core", "0001_squashed_0_2_0")]

    operations = [
        migrations.RunSQL(sql_file("queue_take_cached_plan.sql"), sql_file("queue_take.sql")),
    ]
