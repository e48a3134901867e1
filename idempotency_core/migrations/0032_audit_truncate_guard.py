"""The audit trail's guard covers TRUNCATE: row triggers never see it, so without a
statement trigger one TRUNCATE (or a TRUNCATE ... CASCADE of a table the trail refers
to) would empty what DELETE may not touch.

A session that sets `onefold.audit_truncate` to `allowed` may still empty it: Django's
flush between the test suite's transactional tests (config/test_settings.py) and the
benchmarks' reset (lab/bench/), never the product's connections.
"""

from django.db import migrations

GUARD = """
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
"""

GUARD_REVERSE = """
DROP TRIGGER IF EXISTS idempotency_core_auditentry_no_truncate ON idempotency_core_auditentry;
DROP FUNCTION IF EXISTS onefold_audit_no_truncate();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency_core", "0031_case_routes_notifications"),
    ]

    operations = [migrations.RunSQL(GUARD, GUARD_REVERSE)]
