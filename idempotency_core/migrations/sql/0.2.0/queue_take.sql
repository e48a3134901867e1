-- `onefold_queue_take`: the queue's dequeue as one call (idempotency_core/broker.py).
--
-- The dequeue is planned with sorting off (broker.py says why): a function's SET
-- clause holds for the function's statements only, so `enable_sort` is off where the
-- UPDATE is planned and on again after it. It commits without waiting for the WAL
-- flush: `synchronous_commit`, set in the body for the transaction, holds until the
-- commit of the caller's statement, which is its own transaction (autocommit).
--
-- The rows are taken in a MATERIALIZED WITH query, evaluated once per execution
-- (PostgreSQL's documentation, "WITH Queries"): as `UPDATE ... WHERE id IN (SELECT ...
-- LIMIT n FOR UPDATE SKIP LOCKED)` the planner may run the subquery again for the
-- UPDATE's rows, each run skipping what the last one locked, and one call could take
-- more than `how_many` tasks.

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
