"""Seed data and database-level guards that models cannot express.

- The default destinations ("crm" like a CRM with an external-ID field, "email").
- The console's groups (Reviewers, Replay admins) with their permissions.
- Triggers that refuse UPDATE and DELETE on audit entries (invariant 6), on
  PostgreSQL and SQLite alike.
- The django-q2 sweeper schedule, a 1-minute backstop to `manage.py sweep --loop`.
"""

from datetime import timedelta

from django.db import migrations

REVIEWER_PERMS = ["view_reviewcase", "change_reviewcase", "view_auditentry"]
REPLAY_PERMS = [*REVIEWER_PERMS, "replay_operation"]

POSTGRES_AUDIT_GUARD = """
CREATE OR REPLACE FUNCTION onefold_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit entries are append-only (%% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER idempotency_core_auditentry_append_only
    BEFORE UPDATE OR DELETE ON idempotency_core_auditentry
    FOR EACH ROW EXECUTE FUNCTION onefold_audit_append_only();
"""
POSTGRES_AUDIT_GUARD_REVERSE = """
DROP TRIGGER IF EXISTS idempotency_core_auditentry_append_only ON idempotency_core_auditentry;
DROP FUNCTION IF EXISTS onefold_audit_append_only();
"""
SQLITE_AUDIT_GUARD = [
    """CREATE TRIGGER idempotency_core_auditentry_no_update
       BEFORE UPDATE ON idempotency_core_auditentry
       BEGIN SELECT RAISE(ABORT, 'audit entries are append-only (UPDATE refused)'); END;""",
    """CREATE TRIGGER idempotency_core_auditentry_no_delete
       BEFORE DELETE ON idempotency_core_auditentry
       BEGIN SELECT RAISE(ABORT, 'audit entries are append-only (DELETE refused)'); END;""",
]


def seed_destinations(apps, schema_editor):
    Destination = apps.get_model("idempotency_core", "Destination")
    Destination.objects.get_or_create(
        name="crm",
        defaults={
            "kind": "crm_http",
            "unique_external_ref": True,
            "lookup": True,
            "merge": True,
            "idempotency_keys": False,
            "idempotency_key_retention": timedelta(hours=24),
        },
    )
    Destination.objects.get_or_create(name="email", defaults={"kind": "smtp"})


def create_groups(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    # Permissions are normally created after all migrations; the groups need them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in (("Reviewers", REVIEWER_PERMS), ("Replay admins", REPLAY_PERMS)):
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(
            *Permission.objects.filter(
                content_type__app_label="idempotency_core", codename__in=codenames
            )
        )


def audit_guard(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(POSTGRES_AUDIT_GUARD)
    elif schema_editor.connection.vendor == "sqlite":
        for statement in SQLITE_AUDIT_GUARD:
            schema_editor.execute(statement)


def audit_guard_reverse(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(POSTGRES_AUDIT_GUARD_REVERSE)
    elif schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("DROP TRIGGER IF EXISTS idempotency_core_auditentry_no_update")
        schema_editor.execute("DROP TRIGGER IF EXISTS idempotency_core_auditentry_no_delete")


def sweep_schedule(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name="onefold-sweep",
        defaults={"func": "idempotency_core.tasks.sweep", "schedule_type": "I", "minutes": 1},
    )


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency_core", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("django_q", "0018_task_success_index"),
    ]

    operations = [
        migrations.RunPython(seed_destinations, migrations.RunPython.noop),
        migrations.RunPython(create_groups, migrations.RunPython.noop),
        migrations.RunPython(audit_guard, audit_guard_reverse),
        migrations.RunPython(sweep_schedule, migrations.RunPython.noop),
    ]
