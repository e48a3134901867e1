"""Notices of cases to people (or to the webhook), and what each person chose."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from idempotency_core.models.cases import ReviewCase
from idempotency_core.models.choices import (
    NotificationPreference,
    NotificationStatus,
    choices_valid,
)


class Notification(models.Model):
    """One notice of one case to one person (or to the webhook) for one reason: an
    effect like any other here, with a key (its email's Message-ID) and a unique row,
    so that no retry, sweep or worker crash sends it twice. Sent by a task holding a
    claim (`claim_token`, `lease_expires_at`) committed before the send."""

    class Reason(models.TextChoices):
        OPENED = "opened", "Opened"
        ESCALATED = "escalated", "Escalated"
        HANDED_ON = "handed_on", "Handed on"

    class Channel(models.TextChoices):
        EMAIL = "email", "Email"
        WEBHOOK = "webhook", "Webhook"

    Status = NotificationStatus
    OUTSTANDING = (Status.PENDING, Status.SENDING)

    case = models.ForeignKey(ReviewCase, on_delete=models.CASCADE, related_name="notifications")
    # Null for the webhook, and for an email nobody could receive (status failed).
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="case_notifications",
    )
    reason = models.CharField(max_length=20, choices=Reason.choices)
    channel = models.CharField(max_length=20, choices=Channel.choices)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    # Sent in the person's digest rather than alone.
    digest = models.BooleanField(default=False)
    key = models.CharField(max_length=64, unique=True)
    due_at = models.DateTimeField()
    enqueued_at = models.DateTimeField(null=True, blank=True)
    claim_token = models.UUIDField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    sent_at = models.DateTimeField(null=True, blank=True)
    # Why it could not be sent (never an address: see review/notifications.py).
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["case", "user", "reason"],
                condition=Q(user__isnull=False),
                name="notification_one_per_case_person_reason",
            ),
            models.UniqueConstraint(
                fields=["case", "reason", "channel"],
                condition=Q(user__isnull=True),
                name="notification_one_per_case_reason_channel",
            ),
            choices_valid("status", NotificationStatus, "notification_status_valid"),
            models.CheckConstraint(
                condition=~Q(status="sending") | Q(claim_token__isnull=False),
                name="notification_sending_has_claim",
            ),
        ]
        indexes = [
            # The sweep: what waits to be sent, or is being sent, by when.
            models.Index(
                fields=["due_at"],
                condition=Q(status__in=["pending", "sending"]),
                name="notification_outstanding_idx",
            ),
            # The dashboard: the notices that could not be sent, newest first.
            models.Index(
                fields=["-created_at"],
                condition=Q(status="failed"),
                name="notification_failed_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.reason} notice of case {self.case_id} ({self.status})"


class NotificationChoice(models.Model):
    """What one person chose on the console to receive: every case, a digest, or none.
    No row: what the review block says (a digest when `digest_minutes` is set)."""

    Choice = NotificationPreference

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_choice"
    )
    choice = models.CharField(max_length=20, choices=Choice.choices)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            choices_valid("choice", NotificationPreference, "notificationchoice_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.choice}"
