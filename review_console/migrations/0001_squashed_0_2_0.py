"""The console's schema at Onefold 0.2.0 in one migration; it replaces 0.1.0's
(docs/operations.md, "Upgrading from 0.1.0")."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("review_console", "0001_initial"),
        ("review_console", "0002_bulk_items_atomic"),
        ("review_console", "0003_cause_hold"),
        ("review_console", "0004_settings_admins_sources"),
    ]

    dependencies = [
        ("idempotency_core", "0001_squashed_0_2_0"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="BulkReplayJob",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("reason", models.TextField()),
                ("filter_params", models.JSONField(default=dict)),
                ("filter_description", models.CharField(blank=True, max_length=500)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("queued", "Queued"),
                            ("running", "Running"),
                            ("finished", "Finished"),
                        ],
                        default="queued",
                        max_length=20,
                    ),
                ),
                ("total", models.PositiveIntegerField(default=0)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "created_by",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, to=settings.AUTH_USER_MODEL
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="BulkReplayItem",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("replayed", "Replayed"),
                            ("refused", "Refused"),
                            ("error", "Error"),
                        ],
                        default="pending",
                        max_length=20,
                    ),
                ),
                ("message", models.TextField(blank=True)),
                ("processed_at", models.DateTimeField(blank=True, null=True)),
                (
                    "case",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        to="idempotency_core.reviewcase",
                    ),
                ),
                (
                    "operation",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, to="idempotency_core.operation"
                    ),
                ),
                (
                    "job",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="items",
                        to="review_console.bulkreplayjob",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="CauseHold",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("kind", models.CharField(max_length=30)),
                ("step", models.CharField(max_length=100)),
                ("error_class", models.CharField(blank=True, max_length=100)),
                ("status", models.CharField(blank=True, max_length=20)),
                ("resolution_code", models.CharField(max_length=50)),
                ("reason", models.TextField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("until", models.DateTimeField()),
                (
                    "created_by",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, to=settings.AUTH_USER_MODEL
                    ),
                ),
                (
                    "destination",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="idempotency_core.destination",
                    ),
                ),
            ],
        ),
        migrations.AddConstraint(
            model_name="bulkreplayjob",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", ["queued", "running", "finished"])),
                name="bulkreplayjob_status_valid",
            ),
        ),
        migrations.AddIndex(
            model_name="bulkreplayitem",
            index=models.Index(fields=["job", "status"], name="bulkreplayitem_job_status_idx"),
        ),
        migrations.AddConstraint(
            model_name="bulkreplayitem",
            constraint=models.UniqueConstraint(
                fields=("job", "operation"), name="bulkreplayitem_unique_op"
            ),
        ),
        migrations.AddConstraint(
            model_name="bulkreplayitem",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", ["pending", "replayed", "refused", "error"])),
                name="bulkreplayitem_status_valid",
            ),
        ),
        migrations.AddIndex(
            model_name="causehold",
            index=models.Index(fields=["until"], name="causehold_until_idx"),
        ),
    ]
