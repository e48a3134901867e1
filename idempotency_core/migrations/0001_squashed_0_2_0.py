"""Onefold 0.2.0's schema in one migration.

It replaces 0.1.0's migrations: a database that has all of them records this one as
applied and goes on from here (docs/operations.md, "Upgrading from 0.1.0"); a new
database gets the same schema from it directly. Besides the models:

- the database's own functions and triggers, read from sql/0.2.0/ (a later change to
  one is a new file under its version's folder, loaded by a new migration: a file a
  migration has loaded never changes);
- the rows Onefold starts with: the default destinations, the console's groups with
  their permissions, and django-q2's schedules.
"""

import uuid
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

SQL = Path(__file__).resolve().parent / "sql" / "0.2.0"


def sql_file(name):
    return (SQL / name).read_text(encoding="utf-8")


AUDIT_TRAIL_REVERSE = """
DROP TRIGGER IF EXISTS idempotency_core_auditentry_no_truncate ON idempotency_core_auditentry;
DROP TRIGGER IF EXISTS idempotency_core_auditentry_update_guard ON idempotency_core_auditentry;
DROP TRIGGER IF EXISTS idempotency_core_auditentry_append_only ON idempotency_core_auditentry;
DROP FUNCTION IF EXISTS onefold_audit_no_truncate();
DROP FUNCTION IF EXISTS onefold_audit_erasure_only();
DROP FUNCTION IF EXISTS onefold_audit_append_only();
"""
CONFIG_TABLES = ["source", "sourceapikey", "destination", "businessconfigversion"]
CONFIG_CHANGES_REVERSE = (
    "".join(
        f"DROP TRIGGER IF EXISTS idempotency_core_{table}_config_changed "
        f"ON idempotency_core_{table};\n"
        for table in CONFIG_TABLES
    )
    + """
DROP TRIGGER IF EXISTS idempotency_core_businessconfigversion_append_only
    ON idempotency_core_businessconfigversion;
DROP FUNCTION IF EXISTS onefold_config_append_only();
DROP FUNCTION IF EXISTS onefold_config_changed();
"""
)
QUEUE_TAKE_REVERSE = (
    "DROP FUNCTION IF EXISTS onefold_queue_take(text, timestamptz, timestamptz, integer)"
)
CONFIRMATION_ALLOW_REVERSE = (
    "DROP FUNCTION IF EXISTS onefold_confirmation_allow(bigint, bigint, bigint, uuid, "
    "varchar, timestamptz, timestamptz, integer, integer, text, boolean)"
)

REVIEWER_PERMS = ["view_reviewcase", "change_reviewcase", "view_auditentry"]
GROUPS = {
    "Reviewers": REVIEWER_PERMS,
    "Replay admins": [*REVIEWER_PERMS, "replay_operation"],
    # The configuration, and sources' field maps with the cases that lead to them.
    "Settings admins": [
        "change_businessconfig",
        "view_businessconfigversion",
        "change_source",
        "view_source",
        "view_reviewcase",
    ],
}


def destinations_seed(apps, schema_editor):
    Destination = apps.get_model("idempotency_core", "Destination")
    Destination.objects.get_or_create(name="crm", defaults={"kind": "crm_http"})
    Destination.objects.get_or_create(name="email", defaults={"kind": "smtp"})


def groups_create(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    # Permissions are normally created after all migrations; the groups need them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(
            *Permission.objects.filter(
                content_type__app_label="idempotency_core", codename__in=codenames
            )
        )


def groups_remove(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=GROUPS).delete()


def _next_at(hour):
    now = datetime.now(UTC)
    today = datetime.combine(now.date(), time(hour), tzinfo=UTC)
    return today if today > now else today + timedelta(days=1)


def schedules_create(apps, schema_editor):
    """The sweeper every minute (a backstop to `manage.py sweep --loop`), reconciliation
    after midnight UTC (yesterday is over and its stuck threshold has passed), then the
    payloads' retention. An existing schedule's next run is never moved."""
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name="onefold-sweep",
        defaults={"func": "idempotency_core.tasks.sweep", "schedule_type": "I", "minutes": 1},
    )
    for name, func, hour in (
        ("onefold-reconcile-daily", "idempotency_core.tasks.reconcile_daily", 3),
        ("onefold-purge-payloads", "idempotency_core.tasks.purge_payloads", 4),
    ):
        Schedule.objects.update_or_create(
            name=name,
            defaults={"func": func, "schedule_type": "D"},
            create_defaults={"func": func, "schedule_type": "D", "next_run": _next_at(hour)},
        )


def schedules_remove(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(
        name__in=["onefold-sweep", "onefold-reconcile-daily", "onefold-purge-payloads"]
    ).delete()


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("idempotency_core", "0001_initial"),
        ("idempotency_core", "0002_destinations_roles_audit_guard"),
        ("idempotency_core", "0003_source_destinations"),
        ("idempotency_core", "0004_reconciliation"),
        ("idempotency_core", "0005_operation_arguments"),
        ("idempotency_core", "0006_console_indexes"),
        ("idempotency_core", "0007_event_revises"),
        ("idempotency_core", "0008_source_pipelines"),
        ("idempotency_core", "0009_operation_next_trigger"),
        ("idempotency_core", "0010_operation_held_by"),
        ("idempotency_core", "0011_schedules_name_task_entry_points"),
        ("idempotency_core", "0012_attempt_smtp_code"),
        ("idempotency_core", "0013_source_profiles_and_hook_deliveries"),
        ("idempotency_core", "0014_delivery_source_recent_index"),
        ("idempotency_core", "0015_sourceapikey_expires_at"),
        ("idempotency_core", "0016_destination_kinds_capabilities_from_adapters"),
        ("idempotency_core", "0017_config_change_notify"),
        ("idempotency_core", "0018_review_case_duplicate_held"),
        ("idempotency_core", "0019_operation_allow_duplicate_duplicate_rule"),
        ("idempotency_core", "0020_lean_indexes"),
        ("idempotency_core", "0021_queue_take_function"),
        ("idempotency_core", "0022_confirmation_allowance"),
        ("idempotency_core", "0023_source_captcha"),
        ("idempotency_core", "0024_delivery_receipts"),
        ("idempotency_core", "0025_unreadable_submission_skipped_step"),
        ("idempotency_core", "0026_queue_take_materialized"),
        ("idempotency_core", "0027_destination_budget"),
        ("idempotency_core", "0028_business_configuration"),
        ("idempotency_core", "0029_confirmation_allow_function"),
        ("idempotency_core", "0030_person_erasure"),
        ("idempotency_core", "0031_case_routes_notifications"),
        ("idempotency_core", "0032_audit_truncate_guard"),
        ("idempotency_core", "0033_destination_request_log"),
    ]

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
        ("auth", "0012_alter_user_first_name_max_length"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="AssigneeTurn",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("scope", models.CharField(max_length=255, unique=True)),
                ("turns", models.PositiveBigIntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name="ConfirmationAllowance",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("recipient_digest", models.CharField(max_length=64)),
                ("granted_at", models.DateTimeField()),
                ("by_person", models.BooleanField(default=False)),
            ],
        ),
        migrations.CreateModel(
            name="Delivery",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("received_at", models.DateTimeField(auto_now_add=True)),
                (
                    "outcome",
                    models.CharField(
                        choices=[
                            ("accepted", "Accepted (new event)"),
                            ("replayed", "Repeat answered from the stored event"),
                            ("key_reused", "Refused: key reused with another payload"),
                            ("key_missing", "Refused: no idempotency key"),
                            ("invalid", "Refused: invalid body"),
                            ("too_large", "Refused: body too large"),
                            ("unsupported_media", "Refused: not JSON"),
                            ("unauthorized", "Refused: bad or stale signature, or wrong token"),
                            ("disabled", "Refused: source disabled (sender told to retry)"),
                            ("honeypot", "Ignored: a bot filled the hidden field"),
                            ("captcha_failed", "Refused: CAPTCHA token missing or rejected"),
                            ("unreadable", "Kept for review: does not map to a submission"),
                        ],
                        max_length=20,
                    ),
                ),
                ("status_code", models.PositiveSmallIntegerField()),
                ("fingerprint", models.CharField(blank=True, max_length=64)),
                ("payload_matched", models.BooleanField(null=True)),
                ("raw_body", models.BinaryField(blank=True, null=True)),
                ("content_type", models.CharField(blank=True, max_length=200)),
                ("verification", models.CharField(blank=True, max_length=200)),
                ("receipts", models.PositiveIntegerField(default=1)),
            ],
            options={
                "verbose_name_plural": "deliveries",
            },
        ),
        migrations.CreateModel(
            name="Destination",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.SlugField(unique=True)),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("crm_http", "Sandbox CRM"),
                            ("hubspot", "HubSpot"),
                            ("salesforce", "Salesforce"),
                            ("pipedrive", "Pipedrive"),
                            ("dataverse", "Microsoft Dataverse"),
                            ("smtp", "Email over SMTP"),
                            ("resend", "Resend (email API)"),
                        ],
                        max_length=20,
                    ),
                ),
                ("base_url", models.CharField(blank=True, max_length=300)),
            ],
        ),
        migrations.CreateModel(
            name="DestinationRequest",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("at", models.DateTimeField()),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name="Event",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("key", models.CharField(max_length=255)),
                ("fingerprint", models.CharField(max_length=64)),
                ("payload", models.JSONField(blank=True, null=True)),
                ("form", models.CharField(blank=True, max_length=100)),
                ("contact_digest", models.CharField(blank=True, max_length=64)),
                ("submitted_at", models.DateTimeField(blank=True, null=True)),
                ("received_at", models.DateTimeField(auto_now_add=True)),
                ("payload_purged_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name="Notification",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "reason",
                    models.CharField(
                        choices=[
                            ("opened", "Opened"),
                            ("escalated", "Escalated"),
                            ("handed_on", "Handed on"),
                        ],
                        max_length=20,
                    ),
                ),
                (
                    "channel",
                    models.CharField(
                        choices=[("email", "Email"), ("webhook", "Webhook")], max_length=20
                    ),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Waiting to be sent"),
                            ("sending", "Being sent"),
                            ("sent", "Sent"),
                            ("failed", "Could not be sent"),
                            ("skipped", "Not sent (the person chose none)"),
                        ],
                        default="pending",
                        max_length=20,
                    ),
                ),
                ("digest", models.BooleanField(default=False)),
                ("key", models.CharField(max_length=64, unique=True)),
                ("due_at", models.DateTimeField()),
                ("enqueued_at", models.DateTimeField(blank=True, null=True)),
                ("claim_token", models.UUIDField(blank=True, null=True)),
                ("lease_expires_at", models.DateTimeField(blank=True, null=True)),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("sent_at", models.DateTimeField(blank=True, null=True)),
                ("error", models.TextField(blank=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
        migrations.CreateModel(
            name="NotificationChoice",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "choice",
                    models.CharField(
                        choices=[
                            ("every", "An email for every case"),
                            ("digest", "A digest"),
                            ("none", "No email"),
                        ],
                        max_length=20,
                    ),
                ),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
        ),
        migrations.CreateModel(
            name="Operation",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("step", models.CharField(max_length=50)),
                ("position", models.PositiveSmallIntegerField()),
                ("key", models.CharField(max_length=64)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("running", "Running"),
                            ("retry_scheduled", "Retry scheduled"),
                            ("succeeded", "Succeeded"),
                            ("needs_review", "Needs review"),
                            ("cancelled", "Cancelled"),
                        ],
                        default="pending",
                        max_length=20,
                    ),
                ),
                (
                    "recovery",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("", "Normal call"),
                            ("repeat", "Repeat: the action is idempotent by nature"),
                            ("repeat_with_key", "Repeat with the same idempotency key"),
                            ("repeat_unique_ref", "Repeat; a unique reference refuses a copy"),
                            ("lookup_first", "Look up by external reference first"),
                            ("review", "A person decides"),
                        ],
                        max_length=20,
                    ),
                ),
                ("claim_token", models.UUIDField(blank=True, null=True)),
                ("lease_expires_at", models.DateTimeField(blank=True, null=True)),
                ("attempt_count", models.PositiveIntegerField(default=0)),
                ("waits", models.PositiveIntegerField(db_default=0, default=0)),
                ("next_attempt_at", models.DateTimeField(blank=True, null=True)),
                ("enqueued_at", models.DateTimeField(blank=True, null=True)),
                ("first_presented_at", models.DateTimeField(blank=True, null=True)),
                ("destination_ref", models.CharField(blank=True, max_length=200)),
                ("allow_duplicate", models.BooleanField(db_default=False, default=False)),
                ("arguments", models.JSONField(blank=True, null=True)),
                ("content", models.JSONField(blank=True, null=True)),
                (
                    "next_trigger",
                    models.CharField(
                        choices=[
                            ("worker", "Worker"),
                            ("sweeper", "Sweeper"),
                            ("replay", "Manual replay"),
                            ("reviewer", "Reviewer's request"),
                        ],
                        db_default="worker",
                        default="worker",
                        max_length=20,
                    ),
                ),
                ("last_error", models.TextField(blank=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("completed_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name="ReconciliationFinding",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("missing", "Missing"),
                            ("duplicate", "Duplicate external reference"),
                            ("orphan", "Orphan record"),
                            ("removed", "Removed"),
                            ("changed", "Changed"),
                            ("stuck", "Stuck"),
                        ],
                        max_length=20,
                    ),
                ),
                ("subject", models.CharField(max_length=255)),
                ("external_ref", models.CharField(blank=True, max_length=255)),
                ("record_ids", models.TextField(blank=True)),
                ("is_new", models.BooleanField(null=True)),
            ],
        ),
        migrations.CreateModel(
            name="ReconciliationRecord",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("record_id", models.CharField(max_length=100)),
                ("external_ref", models.CharField(blank=True, max_length=255, null=True)),
                ("created_at", models.DateTimeField()),
                ("updated_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name="ReconciliationRun",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("since", models.DateTimeField()),
                ("until", models.DateTimeField()),
                ("as_of", models.DateTimeField()),
                ("listing_since", models.DateTimeField()),
                ("listing_until", models.DateTimeField()),
                ("dry_run", models.BooleanField(default=False)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("listing", "Listing the destination"),
                            ("comparing", "Comparing"),
                            ("opening", "Opening review cases"),
                            ("completed", "Completed"),
                        ],
                        default="listing",
                        max_length=20,
                    ),
                ),
                ("cursor", models.TextField(blank=True)),
                ("pages_fetched", models.PositiveIntegerField(default=0)),
                ("records_staged", models.PositiveBigIntegerField(default=0)),
                ("events_count", models.PositiveBigIntegerField(blank=True, null=True)),
                ("findings_total", models.JSONField(blank=True, default=dict)),
                ("findings_new", models.JSONField(blank=True, default=dict)),
                ("lease_token", models.UUIDField(blank=True, null=True)),
                ("lease_expires_at", models.DateTimeField(blank=True, null=True)),
                ("trigger", models.CharField(default="command", max_length=20)),
                ("started_at", models.DateTimeField(auto_now_add=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name="ReviewCase",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("ambiguous_outcome", "Ambiguous outcome"),
                            ("interrupted_send", "Interrupted send (may have been sent)"),
                            ("permanent_failure", "Permanent failure"),
                            ("retries_exhausted", "Retries exhausted"),
                            ("suspected_duplicate", "Suspected duplicate"),
                            ("duplicate_held", "Suspected duplicate held before the write"),
                            ("duplicate_rule", "The CRM matched an existing record"),
                            ("late_replay", "Late replay"),
                            ("confirmation_held", "Confirmation held, not sent"),
                            (
                                "unreadable_submission",
                                "Unreadable submission, kept for a corrected map",
                            ),
                            ("recon_missing", "Reconciliation: missing in destination"),
                            ("recon_duplicate", "Reconciliation: duplicate external reference"),
                            ("recon_orphan", "Reconciliation: orphan destination record"),
                            ("recon_removed", "Reconciliation: record removed"),
                            ("recon_changed", "Reconciliation: reference changed"),
                            ("recon_stuck", "Reconciliation: operation stuck"),
                        ],
                        max_length=30,
                    ),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("open", "Open"),
                            ("in_progress", "In progress"),
                            ("resolved", "Resolved"),
                            ("closed", "Closed"),
                        ],
                        default="open",
                        max_length=20,
                    ),
                ),
                ("subject", models.CharField(max_length=255)),
                ("summary", models.TextField(help_text="What happened and who should act.")),
                ("evidence", models.JSONField(blank=True, default=dict)),
                ("resolution_code", models.CharField(blank=True, max_length=50)),
                ("resolution_note", models.TextField(blank=True)),
                ("resolved_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={
                "permissions": [
                    ("replay_operation", "Can replay an operation"),
                    ("view_contact_details", "Can see unmasked contact details"),
                    ("erase_personal_data", "Can export and erase a person's personal data"),
                ],
            },
        ),
        migrations.CreateModel(
            name="Source",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=100, unique=True)),
                ("is_active", models.BooleanField(default=True)),
                ("key_salt", models.CharField(editable=False, max_length=64)),
                ("rate_per_minute", models.PositiveIntegerField(blank=True, null=True)),
                ("task_assignee", models.CharField(default="sales", max_length=100)),
                ("pipelines", models.JSONField(blank=True, default=dict)),
                ("profile", models.CharField(default="api", max_length=20)),
                ("profile_overrides", models.JSONField(blank=True, default=dict)),
                ("hook_token_digest", models.CharField(blank=True, max_length=64)),
                ("default_form", models.CharField(blank=True, max_length=100)),
                ("thank_you_url", models.URLField(blank=True, max_length=500)),
                ("duplicates", models.CharField(default="flag", max_length=10)),
                ("captcha_provider", models.CharField(blank=True, default="", max_length=20)),
                ("captcha_secret", models.CharField(blank=True, default="", max_length=200)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
        migrations.CreateModel(
            name="SourceApiKey",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "prefix",
                    models.CharField(
                        help_text="First characters, to recognise a key.", max_length=16
                    ),
                ),
                ("digest", models.CharField(max_length=64, unique=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                ("expires_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name="SourceSecret",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("secret", models.CharField(max_length=200)),
                (
                    "prefix",
                    models.CharField(help_text="First characters, to recognise it.", max_length=8),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
        migrations.CreateModel(
            name="Attempt",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("number", models.PositiveIntegerField()),
                ("claim_token", models.UUIDField()),
                (
                    "trigger",
                    models.CharField(
                        choices=[
                            ("worker", "Worker"),
                            ("sweeper", "Sweeper"),
                            ("replay", "Manual replay"),
                            ("reviewer", "Reviewer's request"),
                        ],
                        default="worker",
                        max_length=20,
                    ),
                ),
                ("recovery", models.CharField(blank=True, max_length=20)),
                ("started_at", models.DateTimeField()),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "outcome",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("succeeded", "Succeeded"),
                            ("retryable", "Retryable (not applied)"),
                            ("permanent", "Permanent (needs correction)"),
                            ("ambiguous", "Ambiguous (may have been applied)"),
                            ("interrupted", "Interrupted (lease expired)"),
                            ("skipped", "Skipped (nothing to do)"),
                            ("waited", "Waited (rate limit or paused destination)"),
                        ],
                        max_length=20,
                        null=True,
                    ),
                ),
                ("error_class", models.CharField(blank=True, max_length=100)),
                ("error_message", models.TextField(blank=True)),
                ("http_status", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("smtp_code", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("destination_ref", models.CharField(blank=True, max_length=200)),
                (
                    "adopted",
                    models.BooleanField(
                        default=False, help_text="The effect existed and was adopted."
                    ),
                ),
                ("retry_after_seconds", models.FloatField(blank=True, null=True)),
                (
                    "triggered_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="AuditEntry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("at", models.DateTimeField(auto_now_add=True, db_index=True)),
                ("actor_label", models.CharField(max_length=150)),
                ("action", models.CharField(max_length=50)),
                ("reason", models.TextField(blank=True)),
                ("details", models.JSONField(blank=True, default=dict)),
                (
                    "actor",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "audit entries",
            },
        ),
        migrations.CreateModel(
            name="BusinessConfigVersion",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("number", models.PositiveIntegerField(unique=True)),
                ("document", models.JSONField(default=dict)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("actor_label", models.CharField(max_length=150)),
                ("reason", models.TextField(blank=True)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "permissions": [("change_businessconfig", "Can change the business configuration")],
            },
        ),
        migrations.CreateModel(
            name="CaseRoute",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("target", models.CharField(max_length=150)),
                ("routed_at", models.DateTimeField()),
                ("escalated_at", models.DateTimeField(blank=True, null=True)),
                ("escalated_to", models.CharField(blank=True, max_length=150)),
                ("handed_on_at", models.DateTimeField(blank=True, null=True)),
                (
                    "group",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="auth.group",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="DestinationBudget",
            fields=[
                (
                    "destination",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="budget",
                        serialize=False,
                        to="idempotency_core.destination",
                    ),
                ),
                ("requests", models.PositiveIntegerField(blank=True, null=True)),
                ("per_seconds", models.FloatField(blank=True, null=True)),
                ("origin", models.CharField(blank=True, max_length=20)),
                ("spacing_seconds", models.FloatField(default=0)),
                ("tolerance_seconds", models.FloatField(default=0)),
                ("next_free_at", models.DateTimeField(blank=True, null=True)),
                ("paused_until", models.DateTimeField(blank=True, null=True)),
                (
                    "pause_kind",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("", "Not paused"),
                            ("window", "Rate limit"),
                            ("daily", "Daily limit"),
                            ("refused", "Refused by verification"),
                        ],
                        max_length=20,
                    ),
                ),
                ("pause_reason", models.TextField(blank=True)),
                ("paused_at", models.DateTimeField(blank=True, null=True)),
                ("rate_limited_known", models.PositiveIntegerField(db_default=0, default=0)),
                ("rate_limited_unknown", models.PositiveIntegerField(db_default=0, default=0)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
        ),
        migrations.AddConstraint(
            model_name="destination",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "kind__in",
                        [
                            "crm_http",
                            "hubspot",
                            "salesforce",
                            "pipedrive",
                            "dataverse",
                            "smtp",
                            "resend",
                        ],
                    )
                ),
                name="destination_kind_valid",
            ),
        ),
        migrations.AddField(
            model_name="destinationrequest",
            name="destination",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="idempotency_core.destination",
            ),
        ),
        migrations.AddField(
            model_name="event",
            name="revises",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="revisions",
                to="idempotency_core.event",
            ),
        ),
        migrations.AddField(
            model_name="delivery",
            name="event",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="deliveries",
                to="idempotency_core.event",
            ),
        ),
        migrations.AddField(
            model_name="auditentry",
            name="event",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                to="idempotency_core.event",
            ),
        ),
        migrations.AddField(
            model_name="notification",
            name="user",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="case_notifications",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="notificationchoice",
            name="user",
            field=models.OneToOneField(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="notification_choice",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="operation",
            name="destination",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, to="idempotency_core.destination"
            ),
        ),
        migrations.AddField(
            model_name="operation",
            name="event",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="operations",
                to="idempotency_core.event",
            ),
        ),
        migrations.AddField(
            model_name="operation",
            name="held_by",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="holding",
                to="idempotency_core.operation",
            ),
        ),
        migrations.AddField(
            model_name="operation",
            name="next_triggered_by",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="confirmationallowance",
            name="operation",
            field=models.OneToOneField(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="idempotency_core.operation",
            ),
        ),
        migrations.AddField(
            model_name="auditentry",
            name="operation",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                to="idempotency_core.operation",
            ),
        ),
        migrations.AddField(
            model_name="attempt",
            name="operation",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="attempts",
                to="idempotency_core.operation",
            ),
        ),
        migrations.AddField(
            model_name="reconciliationfinding",
            name="event",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="idempotency_core.event",
            ),
        ),
        migrations.AddField(
            model_name="reconciliationfinding",
            name="operation",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="idempotency_core.operation",
            ),
        ),
        migrations.AddField(
            model_name="reconciliationrun",
            name="destination",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="idempotency_core.destination",
            ),
        ),
        migrations.AddField(
            model_name="reconciliationrecord",
            name="run",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="idempotency_core.reconciliationrun",
            ),
        ),
        migrations.AddField(
            model_name="reconciliationfinding",
            name="run",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="findings",
                to="idempotency_core.reconciliationrun",
            ),
        ),
        migrations.AddField(
            model_name="reviewcase",
            name="event",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="review_cases",
                to="idempotency_core.event",
            ),
        ),
        migrations.AddField(
            model_name="reviewcase",
            name="operation",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="review_cases",
                to="idempotency_core.operation",
            ),
        ),
        migrations.AddField(
            model_name="reviewcase",
            name="owner",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="owned_cases",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="reconciliationfinding",
            name="case",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="idempotency_core.reviewcase",
            ),
        ),
        migrations.AddField(
            model_name="notification",
            name="case",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="notifications",
                to="idempotency_core.reviewcase",
            ),
        ),
        migrations.AddField(
            model_name="caseroute",
            name="case",
            field=models.OneToOneField(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="route",
                to="idempotency_core.reviewcase",
            ),
        ),
        migrations.AddField(
            model_name="auditentry",
            name="case",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="audit_entries",
                to="idempotency_core.reviewcase",
            ),
        ),
        migrations.AddField(
            model_name="source",
            name="crm",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="idempotency_core.destination",
            ),
        ),
        migrations.AddField(
            model_name="source",
            name="mailer",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="idempotency_core.destination",
            ),
        ),
        migrations.AddField(
            model_name="reconciliationrun",
            name="source",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="idempotency_core.source",
            ),
        ),
        migrations.AddField(
            model_name="event",
            name="source",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="events",
                to="idempotency_core.source",
            ),
        ),
        migrations.AddField(
            model_name="delivery",
            name="source",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="deliveries",
                to="idempotency_core.source",
            ),
        ),
        migrations.AddField(
            model_name="confirmationallowance",
            name="source",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="idempotency_core.source",
            ),
        ),
        migrations.AddField(
            model_name="sourceapikey",
            name="source",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="api_keys",
                to="idempotency_core.source",
            ),
        ),
        migrations.AddField(
            model_name="sourcesecret",
            name="source",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="secrets",
                to="idempotency_core.source",
            ),
        ),
        migrations.AddIndex(
            model_name="destinationrequest",
            index=models.Index(fields=["destination", "at"], name="destination_request_at"),
        ),
        migrations.AddConstraint(
            model_name="notificationchoice",
            constraint=models.CheckConstraint(
                condition=models.Q(("choice__in", ["every", "digest", "none"])),
                name="notificationchoice_valid",
            ),
        ),
        migrations.AddIndex(
            model_name="operation",
            index=models.Index(
                condition=models.Q(
                    ("next_attempt_at__isnull", False),
                    ("status__in", ["pending", "retry_scheduled"]),
                ),
                fields=["next_attempt_at"],
                name="operation_due_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="operation",
            index=models.Index(
                condition=models.Q(("held_by__isnull", False)),
                fields=["held_by"],
                name="operation_held_by_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="operation",
            index=models.Index(
                condition=models.Q(("next_triggered_by__isnull", False)),
                fields=["next_triggered_by"],
                name="operation_triggered_by_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="operation",
            index=models.Index(
                condition=models.Q(("status", "running")),
                fields=["lease_expires_at"],
                name="operation_lease_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="operation",
            index=models.Index(fields=["status"], name="operation_status_idx"),
        ),
        migrations.AddIndex(
            model_name="operation",
            index=models.Index(
                condition=models.Q(("destination_ref", ""), _negated=True),
                fields=["destination_ref"],
                name="operation_destination_ref_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="operation",
            constraint=models.UniqueConstraint(
                fields=("event", "step"), name="operation_unique_event_step"
            ),
        ),
        migrations.AddConstraint(
            model_name="operation",
            constraint=models.UniqueConstraint(fields=("key",), name="operation_unique_key"),
        ),
        migrations.AddConstraint(
            model_name="operation",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("held_by__isnull", True), ("status", "needs_review"), _connector="OR"
                ),
                name="operation_held_needs_review",
            ),
        ),
        migrations.AddConstraint(
            model_name="operation",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "status__in",
                        [
                            "pending",
                            "running",
                            "retry_scheduled",
                            "succeeded",
                            "needs_review",
                            "cancelled",
                        ],
                    )
                ),
                name="operation_status_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="operation",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("status", "running"), _negated=True),
                    models.Q(("claim_token__isnull", False), ("lease_expires_at__isnull", False)),
                    _connector="OR",
                ),
                name="operation_running_has_claim",
            ),
        ),
        migrations.AddIndex(
            model_name="attempt",
            index=models.Index(fields=["started_at"], name="attempt_started_idx"),
        ),
        migrations.AddConstraint(
            model_name="attempt",
            constraint=models.UniqueConstraint(
                fields=("operation", "number"), name="attempt_unique_operation_number"
            ),
        ),
        migrations.AddConstraint(
            model_name="attempt",
            constraint=models.UniqueConstraint(
                condition=models.Q(("outcome__isnull", True)),
                fields=("operation",),
                name="attempt_one_running_per_operation",
            ),
        ),
        migrations.AddConstraint(
            model_name="attempt",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("outcome__isnull", True),
                    (
                        "outcome__in",
                        [
                            "succeeded",
                            "retryable",
                            "permanent",
                            "ambiguous",
                            "interrupted",
                            "skipped",
                            "waited",
                        ],
                    ),
                    _connector="OR",
                ),
                name="attempt_outcome_valid",
            ),
        ),
        migrations.AddIndex(
            model_name="reviewcase",
            index=models.Index(
                condition=models.Q(("status__in", ["open", "in_progress"])),
                fields=["created_at", "id"],
                name="reviewcase_open_queue_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="reviewcase",
            index=models.Index(
                condition=models.Q(("status__in", ["open", "in_progress"])),
                fields=["kind", "created_at", "id"],
                name="reviewcase_open_kind_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="reviewcase",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status__in", ["open", "in_progress"])),
                fields=("subject", "kind"),
                name="reviewcase_one_open_per_subject_kind",
            ),
        ),
        migrations.AddConstraint(
            model_name="reviewcase",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", ["open", "in_progress", "resolved", "closed"])),
                name="reviewcase_status_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="reviewcase",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "kind__in",
                        [
                            "ambiguous_outcome",
                            "interrupted_send",
                            "permanent_failure",
                            "retries_exhausted",
                            "suspected_duplicate",
                            "duplicate_held",
                            "duplicate_rule",
                            "late_replay",
                            "confirmation_held",
                            "unreadable_submission",
                            "recon_missing",
                            "recon_duplicate",
                            "recon_orphan",
                            "recon_removed",
                            "recon_changed",
                            "recon_stuck",
                        ],
                    )
                ),
                name="reviewcase_kind_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="reconciliationfinding",
            constraint=models.UniqueConstraint(
                fields=("run", "kind", "subject"), name="reconciliationfinding_unique"
            ),
        ),
        migrations.AddConstraint(
            model_name="reconciliationfinding",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("kind__in", ["missing", "duplicate", "orphan", "removed", "changed", "stuck"])
                ),
                name="reconciliationfinding_kind_valid",
            ),
        ),
        migrations.AddIndex(
            model_name="notification",
            index=models.Index(
                condition=models.Q(("status__in", ["pending", "sending"])),
                fields=["due_at"],
                name="notification_outstanding_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="notification",
            index=models.Index(
                condition=models.Q(("status", "failed")),
                fields=["-created_at"],
                name="notification_failed_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="notification",
            constraint=models.UniqueConstraint(
                condition=models.Q(("user__isnull", False)),
                fields=("case", "user", "reason"),
                name="notification_one_per_case_person_reason",
            ),
        ),
        migrations.AddConstraint(
            model_name="notification",
            constraint=models.UniqueConstraint(
                condition=models.Q(("user__isnull", True)),
                fields=("case", "reason", "channel"),
                name="notification_one_per_case_reason_channel",
            ),
        ),
        migrations.AddConstraint(
            model_name="notification",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("status__in", ["pending", "sending", "sent", "failed", "skipped"])
                ),
                name="notification_status_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="notification",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("status", "sending"), _negated=True),
                    ("claim_token__isnull", False),
                    _connector="OR",
                ),
                name="notification_sending_has_claim",
            ),
        ),
        migrations.AddIndex(
            model_name="caseroute",
            index=models.Index(
                condition=models.Q(("escalated_at__isnull", True)),
                fields=["routed_at"],
                name="caseroute_unescalated_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="caseroute",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("group__isnull", True), ("user__isnull", True), _connector="OR"
                ),
                name="caseroute_group_or_user",
            ),
        ),
        migrations.AddIndex(
            model_name="auditentry",
            index=models.Index(fields=["case", "at"], name="audit_case_idx"),
        ),
        migrations.AddConstraint(
            model_name="source",
            constraint=models.CheckConstraint(
                condition=models.Q(("duplicates__in", ["flag", "hold"])),
                name="source_duplicates_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="source",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("captcha_provider__in", ["", "turnstile", "hcaptcha", "recaptcha"])
                ),
                name="source_captcha_provider_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="source",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("captcha_provider", ""),
                    models.Q(("captcha_secret", ""), _negated=True),
                    _connector="OR",
                ),
                name="source_captcha_has_secret",
            ),
        ),
        migrations.AddIndex(
            model_name="reconciliationrun",
            index=models.Index(
                condition=models.Q(("status", "completed"), _negated=True),
                fields=["destination", "since", "until"],
                name="reconciliationrun_unfinished",
            ),
        ),
        migrations.AddConstraint(
            model_name="reconciliationrun",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("status__in", ["listing", "comparing", "opening", "completed"])
                ),
                name="reconciliationrun_status_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="reconciliationrun",
            constraint=models.CheckConstraint(
                condition=models.Q(("since__lt", models.F("until"))),
                name="reconciliationrun_period_valid",
            ),
        ),
        migrations.AddIndex(
            model_name="event",
            index=models.Index(fields=["received_at"], name="event_received_idx"),
        ),
        migrations.AddIndex(
            model_name="event",
            index=models.Index(fields=["contact_digest"], name="event_contact_idx"),
        ),
        migrations.AddIndex(
            model_name="event",
            index=models.Index(
                condition=models.Q(("revises__isnull", False)),
                fields=["revises"],
                name="event_revises_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="event",
            constraint=models.UniqueConstraint(
                fields=("source", "key"), name="event_unique_source_key"
            ),
        ),
        migrations.AddIndex(
            model_name="delivery",
            index=models.Index(fields=["event", "received_at"], name="delivery_event_idx"),
        ),
        migrations.AddIndex(
            model_name="delivery",
            index=models.Index(fields=["source", "received_at"], name="delivery_source_recent_idx"),
        ),
        migrations.AddIndex(
            model_name="delivery",
            index=models.Index(
                condition=models.Q(("outcome", "unauthorized")),
                fields=["source", "-received_at"],
                name="delivery_source_refused_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="delivery",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "outcome__in",
                        [
                            "accepted",
                            "replayed",
                            "key_reused",
                            "key_missing",
                            "invalid",
                            "too_large",
                            "unsupported_media",
                            "unauthorized",
                            "disabled",
                            "honeypot",
                            "captcha_failed",
                            "unreadable",
                        ],
                    )
                ),
                name="delivery_outcome_valid",
            ),
        ),
        migrations.AddIndex(
            model_name="confirmationallowance",
            index=models.Index(
                fields=["recipient_digest", "granted_at"], name="confirmation_recipient_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="confirmationallowance",
            index=models.Index(fields=["source", "granted_at"], name="confirmation_source_idx"),
        ),
        migrations.RunSQL(sql_file("audit_trail.sql"), AUDIT_TRAIL_REVERSE),
        migrations.RunSQL(sql_file("config_changes.sql"), CONFIG_CHANGES_REVERSE),
        migrations.RunSQL(sql_file("queue_take.sql"), QUEUE_TAKE_REVERSE),
        migrations.RunSQL(sql_file("confirmation_allow.sql"), CONFIRMATION_ALLOW_REVERSE),
        migrations.RunPython(destinations_seed, migrations.RunPython.noop),
        migrations.RunPython(groups_create, groups_remove),
        migrations.RunPython(schedules_create, schedules_remove),
    ]
