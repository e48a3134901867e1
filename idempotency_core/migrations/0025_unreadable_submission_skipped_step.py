"""A verified delivery that maps to no submission is kept: its delivery outcome and its
case kind; a step Onefold skips by its own rule (a confirmation with no address)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency_core", "0024_delivery_receipts"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="attempt",
            name="attempt_outcome_valid",
        ),
        migrations.RemoveConstraint(
            model_name="delivery",
            name="delivery_outcome_valid",
        ),
        migrations.RemoveConstraint(
            model_name="reviewcase",
            name="reviewcase_kind_valid",
        ),
        migrations.AlterField(
            model_name="attempt",
            name="outcome",
            field=models.CharField(
                blank=True,
                choices=[
                    ("succeeded", "Succeeded"),
                    ("retryable", "Retryable (not applied)"),
                    ("permanent", "Permanent (needs correction)"),
                    ("ambiguous", "Ambiguous (may have been applied)"),
                    ("interrupted", "Interrupted (lease expired)"),
                    ("skipped", "Skipped (nothing to do)"),
                ],
                max_length=20,
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="delivery",
            name="outcome",
            field=models.CharField(
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
                    ("unreadable_submission", "Unreadable submission, kept for a corrected map"),
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
                        ],
                    ),
                    _connector="OR",
                ),
                name="attempt_outcome_valid",
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
    ]
