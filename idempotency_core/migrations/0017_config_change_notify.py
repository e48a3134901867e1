"""Writes to sources, API keys and destinations NOTIFY `onefold_config` (PostgreSQL).

Web processes cache what every submission reads of these tables (the source an API key
names, a source's destinations: idempotency_core/config_cache.py) and empty the
cache on this notification. Triggers rather than code: a service, the admin, a command
or raw SQL in any process all write through them, and a revoked key must stop working
from the next request whoever revoked it. One notification per statement; PostgreSQL
delivers it at commit and folds repeats within a transaction into one.
"""

from django.db import migrations

TABLES = [
    "idempotency_core_source",
    "idempotency_core_sourceapikey",
    "idempotency_core_destination",
]
FUNCTION = """
CREATE OR REPLACE FUNCTION onefold_config_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('onefold_config', TG_TABLE_NAME);
    RETURN NULL;
END;
$$;
"""


def notify_triggers(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return  # SQLite: the cache is not used (config_cache.py), nothing to notify
    schema_editor.execute(FUNCTION)
    for table in TABLES:
        schema_editor.execute(
            f"CREATE TRIGGER {table}_config_changed "
            f"AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION onefold_config_changed()"
        )


def notify_triggers_reverse(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_config_changed ON {table}")
    schema_editor.execute("DROP FUNCTION IF EXISTS onefold_config_changed()")


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency_core", "0016_destination_kinds_capabilities_from_adapters"),
    ]

    operations = [
        migrations.RunPython(notify_triggers, notify_triggers_reverse),
    ]
