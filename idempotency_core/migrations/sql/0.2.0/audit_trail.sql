-- The audit trail is append-only (models.AuditEntry). DELETE and TRUNCATE are refused;
-- an UPDATE is refused too, except a person's erasure (idempotency_core/privacy/), which
-- may rewrite only `reason` and `details` of other entries.

CREATE OR REPLACE FUNCTION onefold_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit entries are append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER idempotency_core_auditentry_append_only
    BEFORE DELETE ON idempotency_core_auditentry
    FOR EACH ROW EXECUTE FUNCTION onefold_audit_append_only();

-- The erasure's one UPDATE: it runs in the transaction that inserted its own
-- `person_erased` entry, names that entry in the transaction-local setting
-- `onefold.erasure`, and leaves the entry's id under `details.personal_data_erased_by`,
-- so every rewritten row points at the decision that rewrote it. The `person_erased`
-- entry itself is never rewritten.
CREATE OR REPLACE FUNCTION onefold_audit_erasure_only() RETURNS trigger AS $$
DECLARE
    erasure text := current_setting('onefold.erasure', true);
BEGIN
    IF erasure ~ '^[0-9]{1,18}$'
       AND OLD.id <> erasure::bigint
       AND EXISTS (
           SELECT 1 FROM idempotency_core_auditentry e
           WHERE e.id = erasure::bigint AND e.action = 'person_erased'
       )
       AND NEW.id = OLD.id
       AND NEW.at = OLD.at
       AND NEW.action = OLD.action
       AND NEW.actor_label = OLD.actor_label
       AND NEW.actor_id IS NOT DISTINCT FROM OLD.actor_id
       AND NEW.case_id IS NOT DISTINCT FROM OLD.case_id
       AND NEW.event_id IS NOT DISTINCT FROM OLD.event_id
       AND NEW.operation_id IS NOT DISTINCT FROM OLD.operation_id
       AND NEW.details -> 'personal_data_erased_by' = to_jsonb(erasure::bigint)
    THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'audit entries are append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER idempotency_core_auditentry_update_guard
    BEFORE UPDATE ON idempotency_core_auditentry
    FOR EACH ROW EXECUTE FUNCTION onefold_audit_erasure_only();

-- Row triggers never see TRUNCATE (nor a TRUNCATE ... CASCADE reaching the trail): a
-- statement trigger refuses it. A session that sets `onefold.audit_truncate` to
-- `allowed` may still empty the trail: the test suite's flush (config/test_settings.py)
-- and the benchmarks' reset (lab/bench/), never the product's connections.
CREATE OR REPLACE FUNCTION onefold_audit_no_truncate() RETURNS trigger AS $$
BEGIN
    IF current_setting('onefold.audit_truncate', true) = 'allowed' THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'audit entries are append-only (TRUNCATE refused)'
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER idempotency_core_auditentry_no_truncate
    BEFORE TRUNCATE ON idempotency_core_auditentry
    FOR EACH STATEMENT EXECUTE FUNCTION onefold_audit_no_truncate();
