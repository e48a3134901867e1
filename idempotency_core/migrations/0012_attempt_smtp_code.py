"""Attempts record a mail relay's answer as an SMTP reply code, not as an HTTP status.

The data step moves the codes that email attempts stored in `http_status` (SMTP
250, 451, 550, ...) to `smtp_code`, and back when reversed.
"""

from django.db import migrations, models


def _email_attempts(apps):
    Attempt = apps.get_model("idempotency_core", "Attempt")
    return Attempt.objects.filter(operation__destination__kind="smtp")


def codes_to_smtp(apps, schema_editor):
    _email_attempts(apps).filter(http_status__isnull=False).update(
        smtp_code=models.F("http_status"), http_status=None
    )


def codes_to_http(apps, schema_editor):
    _email_attempts(apps).filter(smtp_code__isnull=False).update(
        http_status=models.F("smtp_code"), smtp_code=None
    )


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency_core", "0011_schedules_name_task_entry_points"),
    ]

    operations = [
        migrations.AddField(
            model_name="attempt",
            name="smtp_code",
            field=models.PositiveSmallIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(codes_to_smtp, codes_to_http),
    ]
