"""`onefold_queue_take`: the queue's dequeue as one call (PostgreSQL; broker.py).

The dequeue must be planned with sorting off (broker.py says why) and must commit
without waiting for the WAL flush. Done by settings sent before it in its own
transaction, that cost four round trips a task (BEGIN, the settings, the UPDATE,
COMMIT) and 3.2 ms of CPU between the pusher and PostgreSQL on a slow day, against
1.3 ms for this call. A function's SET clause holds for the function's statements
only, so `enable_sort` is off where the UPDATE is planned and on again after it;
`synchronous_commit`, set in the body for the transaction, holds until the commit of
the caller's statement, which is its own transaction (autocommit).
"""

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION onefold_queue_take(
    queue_key text, lock_until timestamptz, due_before timestamptz, how_many integer
) RETURNS TABLE (task_id integer, task_payload text)
LANGUAGE sql VOLATILE SET enable_sort = off AS $$
    SELECT set_config('synchronous_commit', 'off', true);
    UPDATE django_q_ormq SET lock = lock_until
    WHERE id IN (
        SELECT id FROM django_q_ormq WHERE key = queue_key AND lock < due_before
        ORDER BY id LIMIT how_many FOR UPDATE SKIP LOCKED)
    RETURNING id, payload;
$$;
"""


def queue_take_create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return  # SQLite: django-q2's own dequeue runs (broker.py)
    schema_editor.execute(FUNCTION)


def queue_take_drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        "DROP FUNCTION IF EXISTS onefold_queue_take(text, timestamptz, timestamptz, integer)"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency_core", "0020_lean_indexes"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [
        migrations.RunPython(queue_take_create, queue_take_drop),
    ]
