"""Bulk replay jobs: a background replay of every case matching a queue filter.

The job row is the truth about progress (django-q2 task messages carry only its
id). Items are the snapshot of what matched when the job started, one row per
operation, so progress is "items done / items" and a rerun skips finished items.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class BulkReplayJob(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        FINISHED = "finished", "Finished"

    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    created_at = models.DateTimeField(auto_now_add=True)
    reason = models.TextField()
    # The queue's query string as a dict of lists: what "matching the filter" meant.
    filter_params = models.JSONField(default=dict)
    filter_description = models.CharField(max_length=500, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    total = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["queued", "running", "finished"]),
                name="bulkreplayjob_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"bulk replay {self.pk} ({self.status})"


class BulkReplayItem(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        REPLAYED = "replayed", "Replayed"
        REFUSED = "refused", "Refused"
        ERROR = "error", "Error"

    DONE = (Status.REPLAYED, Status.REFUSED, Status.ERROR)

    job = models.ForeignKey(BulkReplayJob, on_delete=models.CASCADE, related_name="items")
    operation = models.ForeignKey("idempotency_core.Operation", on_delete=models.PROTECT)
    case = models.ForeignKey(
        "idempotency_core.ReviewCase", on_delete=models.PROTECT, null=True, blank=True
    )
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    message = models.TextField(blank=True)
    processed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # One replay per operation per job, however many cases point at it.
            models.UniqueConstraint(fields=["job", "operation"], name="bulkreplayitem_unique_op"),
            models.CheckConstraint(
                condition=Q(status__in=["pending", "replayed", "refused", "error"]),
                name="bulkreplayitem_status_valid",
            ),
        ]
        indexes = [
            # Progress counts and the runner's "next pending items of this job".
            models.Index(fields=["job", "status"], name="bulkreplayitem_job_status_idx"),
        ]

    def __str__(self) -> str:
        return f"item {self.pk} of job {self.job_id}: {self.status}"


class CauseHold(models.Model):
    """A cause settled "for a while": new open cases with this cause are not listed one by
    one in the queue (nor given by "Next case") until `until`; they are attached to the
    cause's group there instead, with the same decision offered for them. Nothing is
    decided for them automatically: they stay open, counted, and visible in the group
    (review_console/causes.py says why)."""

    kind = models.CharField(max_length=30)
    step = models.CharField(max_length=100)
    destination = models.ForeignKey(
        "idempotency_core.Destination", on_delete=models.PROTECT, related_name="+"
    )
    error_class = models.CharField(max_length=100, blank=True)
    status = models.CharField(max_length=20, blank=True)
    resolution_code = models.CharField(max_length=50)
    reason = models.TextField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    created_at = models.DateTimeField(auto_now_add=True)
    until = models.DateTimeField()

    class Meta:
        indexes = [
            # The holds in force (until > now), read with every queue page.
            models.Index(fields=["until"], name="causehold_until_idx"),
        ]

    def __str__(self) -> str:
        return f"hold of {self.kind}/{self.step} until {self.until:%Y-%m-%d %H:%M}"

    @property
    def hours(self) -> int:
        """The hours chosen (4 or 24), as the person chose them."""
        return round((self.until - self.created_at).total_seconds() / 3600)
