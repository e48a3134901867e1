-- `onefold_confirmation_allow`: a confirmation's decision as one call
-- (idempotency_core/execution/confirmations.py).
--
-- The decision must count what was decided for the same address just before it
-- committed: the recipient's advisory lock first, then the counts and the allowance in
-- a statement that starts after the lock was granted (a statement reads the snapshot
-- taken when it started). In a VOLATILE PL/pgSQL function each statement takes a fresh
-- snapshot (PostgreSQL's documentation, "Function Volatility Categories"), so the lock
-- and then the decision run in one call, in the caller's autocommit statement, whose
-- commit releases the lock. PL/pgSQL keeps the decision's plan for the session.
--
-- The decision, in one statement: an allowance the operation already has (a retry), the
-- counts (bounded by their limits: an index range of at most that many entries), whether
-- the submission's CAPTCHA went unchecked, and the new allowance, inserted only where
-- everything permits it (or a person asked).

CREATE OR REPLACE FUNCTION onefold_confirmation_allow(
    lock_key bigint, for_operation bigint, for_source bigint, for_event uuid,
    digest varchar, granted_now timestamptz, since timestamptz,
    per_recipient integer, per_source integer, unchecked_mark text, asked_by_person boolean
) RETURNS TABLE (
    had_allowance boolean, allowed boolean, sent_to_recipient bigint,
    sent_from_source bigint, captcha_unchecked boolean
)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    RETURN QUERY
    WITH earlier AS (
        SELECT 1 FROM idempotency_core_confirmationallowance a
        WHERE a.operation_id = for_operation
    ), seen AS (
        SELECT
            (SELECT count(*) FROM (
                SELECT 1 FROM idempotency_core_confirmationallowance a
                WHERE a.recipient_digest = digest AND a.granted_at >= since
                LIMIT per_recipient) r) AS to_recipient,
            (SELECT count(*) FROM (
                SELECT 1 FROM idempotency_core_confirmationallowance a
                WHERE a.source_id = for_source AND a.granted_at >= since
                LIMIT per_source) s) AS from_source,
            EXISTS (
                SELECT 1 FROM idempotency_core_delivery d
                WHERE d.event_id = for_event AND d.outcome = 'accepted'
                AND strpos(d.verification, unchecked_mark) > 0) AS unchecked
    ), granted AS (
        INSERT INTO idempotency_core_confirmationallowance
            (operation_id, source_id, recipient_digest, granted_at, by_person)
        SELECT for_operation, for_source, digest, granted_now, asked_by_person FROM seen
        WHERE NOT EXISTS (SELECT 1 FROM earlier)
        AND (asked_by_person OR (NOT seen.unchecked
            AND (digest = '' OR seen.to_recipient < per_recipient)
            AND seen.from_source < per_source))
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM earlier), EXISTS (SELECT 1 FROM granted),
        seen.to_recipient, seen.from_source, seen.unchecked
    FROM seen;
END
$$;
