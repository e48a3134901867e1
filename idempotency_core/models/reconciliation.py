"""Reconciliation: a period's events compared with the records a CRM holds, its
listing staged in ReconciliationRecord (idempotency_core/reconciliation/); findings
become cases."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from idempotency_core.models.cases import ReviewCase
from idempotency_core.models.choices import FindingKind, ReconciliationStatus, choices_valid
from idempotency_core.models.destinations import Destination
from idempotency_core.models.events import Event
from idempotency_core.models.operations import Operation
from idempotency_core.models.sources import Source


class ReconciliationRun(models.Model):
    """One comparison of a period's events with one CRM destination's records.

    Resumable: `cursor` is the destination listing's cursor after the last page
    whose records were committed, written in the same transaction as them. The
    lease keeps two processes from working on one run at once.
    """

    Status = ReconciliationStatus

    destination = models.ForeignKey(Destination, on_delete=models.PROTECT, related_name="+")
    source = models.ForeignKey(
        Source, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # The period: events with since <= received_at < until.
    since = models.DateTimeField()
    until = models.DateTimeField()
    # The snapshot instant: "stuck" and "settled" are judged as of it, so that
    # a resumed run reaches the same findings as an uninterrupted one.
    as_of = models.DateTimeField()
    # The destination records listed (by their created_at): wider than the period,
    # because a record may be created long after its event (retries, replays).
    listing_since = models.DateTimeField()
    listing_until = models.DateTimeField()
    dry_run = models.BooleanField(default=False)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.LISTING)
    cursor = models.TextField(blank=True)
    pages_fetched = models.PositiveIntegerField(default=0)
    records_staged = models.PositiveBigIntegerField(default=0)
    events_count = models.PositiveBigIntegerField(null=True, blank=True)
    # Findings by kind: all of them, and those new in this run (no open case before).
    findings_total = models.JSONField(default=dict, blank=True)
    findings_new = models.JSONField(default=dict, blank=True)
    lease_token = models.UUIDField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    trigger = models.CharField(max_length=20, default="command")
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            choices_valid("status", ReconciliationStatus, "reconciliationrun_status_valid"),
            models.CheckConstraint(
                condition=Q(since__lt=models.F("until")), name="reconciliationrun_period_valid"
            ),
        ]
        indexes = [
            # Automatic resume: the unfinished run of the same scope and period.
            models.Index(
                fields=["destination", "since", "until"],
                condition=~Q(status="completed"),
                name="reconciliationrun_unfinished",
            ),
        ]

    def __str__(self) -> str:
        return (
            f"reconciliation {self.pk} ({self.since:%Y-%m-%d %H:%M} to {self.until:%Y-%m-%d %H:%M})"
        )


class ReconciliationRecord(models.Model):
    """A destination record as listed during a run: staging, deleted when the run completes."""

    # Filled by COPY, read only by set-based queries of its own run (hash joins),
    # so the run_id index is the only one it pays for while loading.
    run = models.ForeignKey(ReconciliationRun, on_delete=models.CASCADE, related_name="+")
    record_id = models.CharField(max_length=100)
    external_ref = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.record_id} ({self.external_ref})"


class ReconciliationFinding(models.Model):
    """One mismatch a run found; `case` is the review case it opened or found open."""

    Kind = FindingKind

    run = models.ForeignKey(ReconciliationRun, on_delete=models.CASCADE, related_name="findings")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    # The review case's subject: "operation:<id>", "external_ref:<ref>" or
    # "record:<destination>:<id>".
    subject = models.CharField(max_length=255)
    event = models.ForeignKey(
        Event, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    operation = models.ForeignKey(
        Operation, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    external_ref = models.CharField(max_length=255, blank=True)
    # Destination record ids involved, comma-separated, oldest first.
    record_ids = models.TextField(blank=True)
    case = models.ForeignKey(
        ReviewCase, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # Null until decided: true when no case of this subject and kind was open before.
    is_new = models.BooleanField(null=True)

    class Meta:
        constraints = [
            # One finding per subject and kind in a run (also makes recomputation
            # after a crash idempotent); serves the drill-down by kind too.
            models.UniqueConstraint(
                fields=["run", "kind", "subject"], name="reconciliationfinding_unique"
            ),
            choices_valid("kind", FindingKind, "reconciliationfinding_kind_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.subject}"

    @property
    def record_id_list(self) -> list[str]:
        return [r for r in self.record_ids.split(",") if r]
