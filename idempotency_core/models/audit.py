"""The audit trail: append-only entries of decisions."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from idempotency_core.models.cases import ReviewCase
from idempotency_core.models.events import Event
from idempotency_core.models.operations import Operation


class AuditEntry(models.Model):
    """An append-only record of a human decision or a consequential automatic one.

    Database triggers refuse UPDATE, DELETE and TRUNCATE on this table; the one UPDATE
    they allow is a person's erasure rewriting the personal parts of `reason` and
    `details` (migrations/sql/0.2.0/audit_trail.sql, idempotency_core/privacy/erasure.py).
    """

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True
    )
    # "user:alice" or "system:sweeper": readable even when the actor is gone.
    actor_label = models.CharField(max_length=150)
    action = models.CharField(max_length=50)
    case = models.ForeignKey(
        ReviewCase, on_delete=models.PROTECT, null=True, blank=True, related_name="audit_entries"
    )
    event = models.ForeignKey(Event, on_delete=models.PROTECT, null=True, blank=True)
    operation = models.ForeignKey(Operation, on_delete=models.PROTECT, null=True, blank=True)
    reason = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name_plural = "audit entries"
        indexes = [
            # The case page shows its own trail.
            models.Index(fields=["case", "at"], name="audit_case_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_label} {self.action}"
