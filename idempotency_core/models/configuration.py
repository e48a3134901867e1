"""The business configuration (idempotency_core/configuration/): one document,
versioned, the newest version in force; and the round robins' counters."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class BusinessConfigVersion(models.Model):
    """One version of the whole business configuration document. Never updated or
    deleted (a database trigger refuses both, migrations/sql/0.2.0/config_changes.sql):
    a restore is a new version holding an older document. An insert NOTIFYs
    `onefold_config`, so every process's cached configuration is dropped at its
    commit."""

    number = models.PositiveIntegerField(unique=True)
    # {"sources": {name: {"forms": {form or "*": {"enquiry": ..., "task": ...}}}}}
    document = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # "user:alice" or "system:config apply": readable even when the user is gone.
    actor_label = models.CharField(max_length=150)
    reason = models.TextField(blank=True)

    class Meta:
        permissions = [("change_businessconfig", "Can change the business configuration")]

    def __str__(self) -> str:
        return f"configuration version {self.number}"


class AssigneeTurn(models.Model):
    """A round-robin's counter: how many tasks it has assigned. Advanced by one atomic
    UPDATE in the transaction that stores the task's rendered content, so concurrent
    workers each take their own turn and a retry (whose content is stored) takes none."""

    # "<source>/<form key>": the configuration block the round robin is written in.
    scope = models.CharField(max_length=255, unique=True)
    turns = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.scope}: {self.turns} turns"
