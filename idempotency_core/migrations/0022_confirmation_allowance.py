"""Confirmations counted per recipient and per source; a held one opens a case."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency_core", "0021_queue_take_function"),
    ]

    operations = [
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
        migrations.RemoveConstraint(
            model_name="reviewcase",
            name="reviewcase_kind_valid",
        ),
        migrations.AlterField(
            model_name="reviewcase",
            name="kind",
            field=models.CharField(
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
            model_name="confirmationallowance",
            name="source",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="idempotency_core.source",
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
    ]
