"""What arrives: an event (one logical submission) and each HTTP receipt of it."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import F, Func, Q

from idempotency_core.models.choices import DeliveryOutcome, choices_valid
from idempotency_core.models.sources import Source


class Event(models.Model):
    """One logical submission, identified by (source, key). Created once."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Not indexed alone: `event_unique_source_key` starts with it. (Every index is written
    # by each submission's one statement; docs/benchmarks.md says what each costs.)
    source = models.ForeignKey(
        Source, on_delete=models.PROTECT, related_name="events", db_index=False
    )
    key = models.CharField(max_length=255)
    # SHA-256 of the canonical JSON payload: kept after the payload is purged so
    # a late repeat can still be told apart from a reused key.
    fingerprint = models.CharField(max_length=64)
    payload = models.JSONField(null=True, blank=True)
    form = models.CharField(max_length=100, blank=True)
    # HMAC of the normalised contact email: links events of one person without
    # keeping the address in an index.
    contact_digest = models.CharField(max_length=64, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    # An edit: this event's effect is an update of that event's enquiry.
    revises = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="revisions",
        db_index=False,  # event_revises_idx: edits only
    )
    received_at = models.DateTimeField(auto_now_add=True)
    payload_purged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "key"], name="event_unique_source_key"),
        ]
        indexes = [
            # Reconciliation and retention scan events by arrival time.
            models.Index(fields=["received_at"], name="event_received_idx"),
            # A person's submissions (equality only: no pattern index beside it).
            models.Index(fields=["contact_digest"], name="event_contact_idx"),
            models.Index(
                fields=["revises"], condition=Q(revises__isnull=False), name="event_revises_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.source_id}:{self.key}"


class BodyDigest(Func):
    """PostgreSQL's own `sha256()` of a kept body (Django's `SHA256` needs pgcrypto)."""

    function = "sha256"
    output_field = models.BinaryField()


class Delivery(models.Model):
    """One HTTP receipt of a submission, first or repeat: evidence of retries."""

    Outcome = DeliveryOutcome

    # Neither foreign key is indexed alone: the two indexes below start with them.
    source = models.ForeignKey(
        Source, on_delete=models.PROTECT, related_name="deliveries", db_index=False
    )
    # Null for refused bodies: nothing of their content is kept.
    event = models.ForeignKey(
        Event,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="deliveries",
        db_index=False,
    )
    received_at = models.DateTimeField(auto_now_add=True)
    outcome = models.CharField(max_length=20, choices=Outcome.choices)
    status_code = models.PositiveSmallIntegerField()
    fingerprint = models.CharField(max_length=64, blank=True)
    payload_matched = models.BooleanField(null=True)
    # A delivery refused because its key names another submission (`key_reused`) is
    # kept on that submission's event, but it is its own sender's: their contact
    # digest, as an event keeps its own, so that their export and erasure find it.
    # The database's default too: a process of the release before, still serving while
    # this one is rolled out, inserts deliveries without naming the column.
    sender_digest = models.CharField(max_length=64, blank=True, default="", db_default="")
    # A hook's delivery as received (verified ones only), kept until the event's
    # payload is purged, so a corrected field map can be re-run (`remap`).
    raw_body = models.BinaryField(null=True, blank=True)
    content_type = models.CharField(max_length=200, blank=True)
    # How the sender was authenticated ("signature verified with secret 1", "token
    # verified"), or why it was not: never the signature or the secret themselves.
    verification = models.CharField(max_length=200, blank=True)
    # How many HTTP receipts the row stands for: 1, except a hook's failed
    # verifications, counted into one row per source a minute (the latest reason
    # kept), so that a flood of wrong credentials cannot flood the table.
    receipts = models.PositiveIntegerField(default=1)

    class Meta:
        verbose_name_plural = "deliveries"
        constraints = [
            choices_valid("outcome", DeliveryOutcome, "delivery_outcome_valid"),
        ]
        indexes = [
            # The case page lists an event's deliveries in order.
            models.Index(fields=["event", "received_at"], name="delivery_event_idx"),
            # A source's page: its recent deliveries and the last day's counts.
            models.Index(fields=["source", "received_at"], name="delivery_source_recent_idx"),
            # A source's page: its latest refused verification, however long ago.
            models.Index(
                fields=["source", "-received_at"],
                condition=Q(outcome="unauthorized"),
                name="delivery_source_refused_idx",
            ),
            # A hook's delivery by its very bytes, for a delivery that its key no longer
            # finds (`hooks.event_kept_from`). Gone with the body when it is purged.
            models.Index(
                F("source"),
                BodyDigest("raw_body"),
                condition=Q(raw_body__isnull=False, payload_matched=True),
                name="delivery_source_body_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.outcome} ({self.status_code}) at {self.received_at:%Y-%m-%d %H:%M:%S}"
