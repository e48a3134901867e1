"""`onefold_queue_take` takes at most `how_many` rows, whatever the plan.

Written as `UPDATE ... WHERE id IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)`, the
subquery is not bound to run once: the planner may execute it again for the
UPDATE's rows, and each execution skips the rows the last one locked, so one call
can take more than `how_many` tasks. tests/core/test_broker.py's burst test saw a
call with a limit of 1 return several tasks, in some pytest-xdist orders of the
fast suite. A WITH query is evaluated once per execution of its statement
(PostgreSQL's documentation, "WITH Queries"), and MATERIALIZED keeps the planner
from folding it back into the UPDATE, so the limit holds. The function's other properties (sorting off where the
dequeue is planned, the commit not waiting for the WAL flush) are unchanged.
"""

import importlib

from django.db import migrations

# The function as it was, for the way back.
PREVIOUS = importlib.import_module("idempotency_core.migrations.0021_queue_take_function").FUNCTION

FUNCTION = """
CREATE OR REPLACE FUNCTION onefold_queue_take(
    queue_key text, lock_until timestamptz, due_before timestamptz, how_many integer
) RETURNS TABLE (task_id integer, task_payload text)
LANGUAGE sql VOLATILE SET enable_sort = off AS $$
    SELECT set_config('synchronous_commit', 'off', true);
    WITH taken AS MATERIALIZED (
        SELECT id FROM django_q_ormq WHERE key = queue_key AND lock < due_before
        ORDER BY id LIMIT how_many FOR UPDATE SKIP LOCKED)
    UPDATE django_q_ormq AS queued SET lock = lock_until
    FROM taken WHERE queued.id = taken.id
    RETURNING queued.id, queued.payload;
$$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency_core", "0025_unreadable_submission_skipped_step"),
    ]

    operations = [migrations.RunSQL(FUNCTION, PREVIOUS)]
