"""What must happen once: an event's operations, each try of one, and the
confirmations the sending limits allowed."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from idempotency_core.models.choices import (
    AttemptOutcome,
    AttemptTrigger,
    OperationRecovery,
    OperationStatus,
    choices_valid,
)
from idempotency_core.models.destinations import Destination
from idempotency_core.models.events import Event
from idempotency_core.models.sources import Source


class Operation(models.Model):
    """One business effect that must happen once: (event, step)."""

    Status = OperationStatus

    CLAIMABLE = (Status.PENDING, Status.RETRY_SCHEDULED)
    DONE = (Status.SUCCEEDED, Status.CANCELLED)

    Recovery = OperationRecovery

    # Not indexed alone: `operation_unique_event_step` starts with it.
    event = models.ForeignKey(
        Event, on_delete=models.PROTECT, related_name="operations", db_index=False
    )
    step = models.CharField(max_length=50)
    position = models.PositiveSmallIntegerField()
    destination = models.ForeignKey(Destination, on_delete=models.PROTECT)
    # Opaque and permanent: what the destination sees as idempotency key,
    # external reference and Message-ID, on every retry and replay.
    # Unique by `operation_unique_key` (a constraint: no pattern index beside it).
    key = models.CharField(max_length=64)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    # Set after an ambiguous or interrupted attempt: the rule the next attempt
    # follows so that it cannot create a second effect.
    recovery = models.CharField(max_length=20, choices=Recovery.choices, blank=True)
    claim_token = models.UUIDField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempt_count = models.PositiveIntegerField(default=0)
    # Attempts that waited (a rate limit, a paused destination) and called nothing that
    # could apply the effect: not counted against ONEFOLD_MAX_ATTEMPTS.
    waits = models.PositiveIntegerField(default=0, db_default=0)
    # Null while an earlier step is unfinished; the step becomes due when set.
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # When a task was last put on the queue for this operation (sweeper bookkeeping).
    enqueued_at = models.DateTimeField(null=True, blank=True)
    # When the operation key was first presented to the destination: the start of
    # the destination's idempotency-key retention window.
    first_presented_at = models.DateTimeField(null=True, blank=True)
    destination_ref = models.CharField(max_length=200, blank=True)
    # A reviewer decided "create anyway" on the CRM's duplicate rule: the create is
    # sent telling the destination to allow a duplicate.
    allow_duplicate = models.BooleanField(default=False, db_default=False)
    # What a step needs beyond the event (a merge: which records); null for
    # pipeline steps, which read the event.
    arguments = models.JSONField(null=True, blank=True)
    # What this effect sends, rendered once before the first call so that every retry
    # and replay sends exactly this (execution/content.py); purged with the payload.
    content = models.JSONField(null=True, blank=True)
    # Who or what scheduled the next attempt; the claim copies it onto the attempt.
    # (db_default too: rows that bulk loads insert with SQL start as the worker's.)
    next_trigger = models.CharField(
        max_length=20,
        choices=AttemptTrigger.choices,
        default=AttemptTrigger.WORKER,
        db_default=AttemptTrigger.WORKER,
    )
    next_triggered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,  # operation_triggered_by_idx: set rows only
    )
    # Set while an earlier step of the event is under review: this step waits in
    # `needs_review` behind it, named in that step's case, until the case is settled
    # (replayed or resolved: back to pending; closed: cancelled).
    held_by = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="holding",
        db_index=False,  # operation_held_by_idx: set rows only
    )
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["event", "step"], name="operation_unique_event_step"),
            models.UniqueConstraint(fields=["key"], name="operation_unique_key"),
            # Only a step that waits for a person can be held.
            models.CheckConstraint(
                condition=Q(held_by__isnull=True) | Q(status="needs_review"),
                name="operation_held_needs_review",
            ),
            choices_valid("status", OperationStatus, "operation_status_valid"),
            # A running operation always has an owner and a lease.
            models.CheckConstraint(
                condition=~Q(status="running")
                | Q(claim_token__isnull=False, lease_expires_at__isnull=False),
                name="operation_running_has_claim",
            ),
        ]
        indexes = [
            # Sweeper: due work, `status IN (pending, retry_scheduled) AND next_attempt_at <= now`
            # (which implies NOT NULL: a step waiting for the one before it has no entry).
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(
                    status__in=["pending", "retry_scheduled"], next_attempt_at__isnull=False
                ),
                name="operation_due_idx",
            ),
            # Foreign keys that are NULL on almost every row: only set rows are indexed.
            models.Index(
                fields=["held_by"], condition=Q(held_by__isnull=False), name="operation_held_by_idx"
            ),
            models.Index(
                fields=["next_triggered_by"],
                condition=Q(next_triggered_by__isnull=False),
                name="operation_triggered_by_idx",
            ),
            # Sweeper: expired leases, `status = running AND lease_expires_at < now`.
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status="running"),
                name="operation_lease_idx",
            ),
            # Dashboard counts by status.
            models.Index(fields=["status"], name="operation_status_idx"),
            # Console search and reconciliation: an operation by its destination reference.
            models.Index(
                fields=["destination_ref"],
                condition=~Q(destination_ref=""),
                name="operation_destination_ref_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.step} of {self.event_id}"


class Attempt(models.Model):
    """One execution try of an operation. Append-only: finished once, never rewritten."""

    Outcome = AttemptOutcome

    Trigger = AttemptTrigger

    operation = models.ForeignKey(Operation, on_delete=models.PROTECT, related_name="attempts")
    number = models.PositiveIntegerField()
    claim_token = models.UUIDField()
    trigger = models.CharField(max_length=20, choices=Trigger.choices, default=Trigger.WORKER)
    triggered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True
    )
    recovery = models.CharField(max_length=20, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    # Null while the attempt holds the claim: the partial unique index below
    # relies on NULL meaning "running".
    outcome = models.CharField(  # noqa: DJ001
        max_length=20, choices=Outcome.choices, null=True, blank=True
    )
    error_class = models.CharField(max_length=100, blank=True)
    error_message = models.TextField(blank=True)
    # The destination's answer code, in its own protocol: an HTTP status for an
    # API, an SMTP reply code for a mail relay (250 is SMTP's success).
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    smtp_code = models.PositiveSmallIntegerField(null=True, blank=True)
    destination_ref = models.CharField(max_length=200, blank=True)
    adopted = models.BooleanField(default=False, help_text="The effect existed and was adopted.")
    retry_after_seconds = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["operation", "number"], name="attempt_unique_operation_number"
            ),
            # Invariant 3: at most one running (unfinished) attempt per operation.
            models.UniqueConstraint(
                fields=["operation"],
                condition=Q(outcome__isnull=True),
                name="attempt_one_running_per_operation",
            ),
            models.CheckConstraint(
                condition=Q(outcome__isnull=True)
                | Q(outcome__in=[c.value for c in AttemptOutcome]),
                name="attempt_outcome_valid",
            ),
        ]
        indexes = [
            # Dashboard: throughput and failure rate over the last 24 hours.
            models.Index(fields=["started_at"], name="attempt_started_idx"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of operation {self.operation_id}"

    @property
    def reply(self) -> str:
        """The answer code as a person reads it: "HTTP 409", "SMTP 250", or ""."""
        if self.smtp_code is not None:
            return f"SMTP {self.smtp_code}"
        if self.http_status is not None:
            return f"HTTP {self.http_status}"
        return ""


class ConfirmationAllowance(models.Model):
    """A confirmation allowed to go out: what the per-recipient and per-source limits
    count (execution/confirmations.py). Written before the send, under the
    recipient's advisory lock, so that concurrent workers take an address's last
    places one at a time; one per operation, so a retry is counted once."""

    operation = models.OneToOneField(Operation, on_delete=models.PROTECT, related_name="+")
    source = models.ForeignKey(Source, on_delete=models.PROTECT, related_name="+", db_index=False)
    # contact_digest of the address: the limit is per person, without keeping the address.
    recipient_digest = models.CharField(max_length=64)
    granted_at = models.DateTimeField()
    # A reviewer's replay or send-again: counted, but never refused by the limit.
    by_person = models.BooleanField(default=False)

    class Meta:
        indexes = [
            # Sends to one address in the last 24 hours.
            models.Index(
                fields=["recipient_digest", "granted_at"], name="confirmation_recipient_idx"
            ),
            # Sends of one source in the last 24 hours.
            models.Index(fields=["source", "granted_at"], name="confirmation_source_idx"),
        ]

    def __str__(self) -> str:
        return f"confirmation of operation {self.operation_id} at {self.granted_at:%Y-%m-%d %H:%M}"
