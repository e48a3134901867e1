"""Reconciliation runs, their staging table and findings; daily schedules for
reconciliation and payload retention (created idempotently: re-running the
data step leaves one schedule of each name, and never moves a next run that
already exists)."""

from datetime import UTC, datetime, time, timedelta

import django.db.models.deletion
from django.db import migrations, models


def _next_at(hour: int) -> datetime:
    now = datetime.now(UTC)
    today = datetime.combine(now.date(), time(hour), tzinfo=UTC)
    return today if today > now else today + timedelta(days=1)


def daily_schedules(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    # After midnight UTC: yesterday is over and its stuck threshold has passed.
    Schedule.objects.update_or_create(
        name="onefold-reconcile-daily",
        defaults={
            "func": "idempotency_core.reconciliation.reconcile_daily",
            "schedule_type": "D",
        },
        create_defaults={
            "func": "idempotency_core.reconciliation.reconcile_daily",
            "schedule_type": "D",
            "next_run": _next_at(3),
        },
    )
    Schedule.objects.update_or_create(
        name="onefold-purge-payloads",
        defaults={"func": "idempotency_core.retention.purge_scheduled", "schedule_type": "D"},
        create_defaults={
            "func": "idempotency_core.retention.purge_scheduled",
            "schedule_type": "D",
            "next_run": _next_at(4),
        },
    )


def remove_schedules(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.filter(name__in=["onefold-reconcile-daily", "onefold-purge-payloads"]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency_core", "0003_source_destinations"),
        ("django_q", "0018_task_success_index"),
    ]

    operations = [
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
                (
                    "destination",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="idempotency_core.destination",
                    ),
                ),
                (
                    "source",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="idempotency_core.source",
                    ),
                ),
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
                (
                    "run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="idempotency_core.reconciliationrun",
                    ),
                ),
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
                (
                    "case",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="idempotency_core.reviewcase",
                    ),
                ),
                (
                    "event",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="idempotency_core.event",
                    ),
                ),
                (
                    "operation",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="idempotency_core.operation",
                    ),
                ),
                (
                    "run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="findings",
                        to="idempotency_core.reconciliationrun",
                    ),
                ),
            ],
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
        migrations.RunPython(daily_schedules, remove_schedules),
    ]
