"""Where submissions come from: a source, its signing secrets and its API keys."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class Source(models.Model):
    """A sender of submissions (a website form). Idempotency keys are scoped per source."""

    name = models.CharField(max_length=100, unique=True)
    is_active = models.BooleanField(default=True)
    # Mixed into operation keys so none can be recomputed from a guessed event key;
    # never changed, or the keys would (docs/architecture.md).
    key_salt = models.CharField(max_length=64, editable=False)
    rate_per_minute = models.PositiveIntegerField(null=True, blank=True)
    task_assignee = models.CharField(max_length=100, default="sales")
    # Steps per form, e.g. {"newsletter": ["send_confirmation"], "*": [...]}; a form
    # not named (and "*" absent) gets the default pipeline. Set through
    # `sources.source_pipeline_set`, which checks each step's prerequisites.
    pipelines = models.JSONField(default=dict, blank=True)
    # Where this source's effects go; empty means the destinations named "crm"
    # and "email" (see Destination).
    crm = models.ForeignKey(
        "Destination", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    mailer = models.ForeignKey(
        "Destination", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # How its deliveries are read (intake/senders/profiles.py): "api" is the JSON
    # API; any other profile has a hook at /hooks/<name>/.
    profile = models.CharField(max_length=20, default="api")
    # The parts of the profile's preset this source replaces (field map, ids, ...).
    profile_overrides = models.JSONField(default=dict, blank=True)
    # SHA-256 of the token in the hook's path, for senders that cannot sign.
    hook_token_digest = models.CharField(max_length=64, blank=True)
    # The form name of submissions whose delivery names none.
    default_form = models.CharField(max_length=100, blank=True)
    # Where the html profile sends the browser after a submission (303).
    thank_you_url = models.URLField(max_length=500, blank=True)
    # A near-identical submission under another key: "flag" (both processed, a
    # case offers a merge) or "hold" (waits for a person before its CRM write).
    duplicates = models.CharField(max_length=10, default="flag")
    # The html profile's CAPTCHA (intake/senders/captcha.py). The secret is kept in clear
    # (siteverify needs it), shown only by its first characters, never logged.
    captcha_provider = models.CharField(max_length=20, blank=True, default="")
    captcha_secret = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(duplicates__in=["flag", "hold"]), name="source_duplicates_valid"
            ),
            models.CheckConstraint(
                condition=Q(captcha_provider__in=["", "turnstile", "hcaptcha", "recaptcha"]),
                name="source_captcha_provider_valid",
            ),
            # A provider without its secret could verify nothing.
            models.CheckConstraint(
                condition=Q(captcha_provider="") | ~Q(captcha_secret=""),
                name="source_captcha_has_secret",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class SourceSecret(models.Model):
    """A signing secret of a source's sender. Several at once while one is rotated:
    a delivery signed with any of them verifies. Kept in clear (an HMAC needs it),
    shown once, never logged."""

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="secrets")
    secret = models.CharField(max_length=200)
    prefix = models.CharField(max_length=8, help_text="First characters, to recognise it.")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.source.name}:{self.prefix}…"


class SourceApiKey(models.Model):
    """An API key of a source, stored as a SHA-256 digest only (keys are 32 random bytes)."""

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="api_keys")
    prefix = models.CharField(max_length=16, help_text="First characters, to recognise a key.")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Revoked (`revoke_key`): refused from this moment on.
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Replaced (`rotate_key --overlap-seconds N`): keeps working until then, so the
    # sender can switch to the new key without a gap; refused afterwards.
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.source.name}:{self.prefix}…"
