"""The html profile's CAPTCHA: a source's provider and secret; refused deliveries."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency_core", "0022_confirmation_allowance"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="delivery",
            name="delivery_outcome_valid",
        ),
        migrations.AddField(
            model_name="source",
            name="captcha_provider",
            field=models.CharField(blank=True, default="", max_length=20),
        ),
        migrations.AddField(
            model_name="source",
            name="captcha_secret",
            field=models.CharField(blank=True, default="", max_length=200),
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
                ],
                max_length=20,
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
                        ],
                    )
                ),
                name="delivery_outcome_valid",
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
    ]
