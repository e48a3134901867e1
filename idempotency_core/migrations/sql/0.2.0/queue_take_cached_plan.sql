-- `onefold_queue_take`, as PL/pgSQL: the form in force (queue_take.sql was the first).
--
-- PostgreSQL plans a LANGUAGE sql function's statements at every call when it cannot
-- inline the function, and a function with a SET clause is never inlined: each dequeue
-- planned its UPDATE again, several times the cost of running it. PL/pgSQL keeps
-- its statements' plans for the connection (PostgreSQL's documentation, "PL/pgSQL: Plan
-- Caching"), so a pusher's connection plans the dequeue once.
--
-- A kept plan must suit every size the queue will have, and the statistics it is made
-- from say "empty" most of the time (a cluster polls an idle queue): made from them, the
-- UPDATE found each taken row by reading the whole table, and kept, it read every row
-- of a later burst for each task. With sequential scans off as well as sorting (the SET
-- clauses hold while the function's statements are planned and run, and PL/pgSQL plans
-- them there), walking the primary key is the only cheap plan for both the rows taken
-- and the rows updated, whatever the statistics.
--
-- The rest is queue_take.sql's, and for its reasons: the commit does not wait for the
-- WAL flush (`synchronous_commit`, set for the transaction, which is the caller's
-- statement in autocommit); the rows are taken in a MATERIALIZED WITH query, evaluated
-- once per execution, so that one call never takes more than `how_many` tasks.

CREATE OR REPLACE FUNCTION onefold_queue_take(
    queue_key text, lock_until timestamptz, due_before timestamptz, how_many integer
) RETURNS TABLE (task_id integer, task_payload text)
LANGUAGE plpgsql VOLATILE SET enable_sort = off SET enable_seqscan = off AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN QUERY
    WITH taken AS MATERIALIZED (
        SELECT q.id FROM django_q_ormq q WHERE q.key = queue_key AND q.lock < due_before
        ORDER BY q.id LIMIT how_many FOR UPDATE SKIP LOCKED)
    UPDATE django_q_ormq AS queued SET lock = lock_until
    FROM taken WHERE queued.id = taken.id
    RETURNING queued.id, queued.payload;
END
$$;
