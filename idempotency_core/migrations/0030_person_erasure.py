"""A person's erasure (idempotency_core/privacy/): its permission, and the one UPDATE the
audit trail's guard allows.

The audit trail stays append-only: DELETE is refused as before, and so is any UPDATE,
except a rewrite made by an erasure. That rewrite runs in the transaction that inserted
the erasure's own `person_erased` entry, names that entry in the transaction-local
setting `onefold.erasure`, may change only `reason` and `details`, and must leave the
entry's id under `details.personal_data_erased_by`, so every rewritten row points at
the decision that rewrote it. The `person_erased` entry itself can never be rewritten.
"""

from django.db import migrations

GUARD = """
DROP TRIGGER IF EXISTS idempotency_core_auditentry_append_only ON idempotency_core_auditentry;
CREATE TRIGGER idempotency_core_auditentry_append_only
    BEFORE DELETE ON idempotency_core_auditentry
    FOR EACH ROW EXECUTE FUNCTION onefold_audit_append_only();

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
"""

GUARD_REVERSE = """
DROP TRIGGER IF EXISTS idempotency_core_auditentry_update_guard ON idempotency_core_auditentry;
DROP FUNCTION IF EXISTS onefold_audit_erasure_only();
DROP TRIGGER IF EXISTS idempotency_core_auditentry_append_only ON idempotency_core_auditentry;
CREATE TRIGGER idempotency_core_auditentry_append_only
    BEFORE UPDATE OR DELETE ON idempotency_core_auditentry
    FOR EACH ROW EXECUTE FUNCTION onefold_audit_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency_core", "0029_confirmation_allow_function"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="reviewcase",
            options={
                "permissions": [
                    ("replay_operation", "Can replay an operation"),
                    ("view_contact_details", "Can see unmasked contact details"),
                    ("erase_personal_data", "Can export and erase a person's personal data"),
                ]
            },
        ),
        migrations.RunSQL(GUARD, GUARD_REVERSE),
    ]
