"""Work for a person: review cases, and who receives them."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from idempotency_core.models.choices import CaseKind, CaseStatus, choices_valid
from idempotency_core.models.events import Event
from idempotency_core.models.operations import Operation


class ReviewCase(models.Model):
    """Work for a person: something Onefold could not prove or could not do."""

    Kind = CaseKind

    Status = CaseStatus

    OPEN_STATUSES = (Status.OPEN, Status.IN_PROGRESS)

    kind = models.CharField(max_length=30, choices=Kind.choices)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.OPEN)
    # What the case is about, e.g. "operation:42" or "external_ref:opk_…".
    subject = models.CharField(max_length=255)
    event = models.ForeignKey(
        Event, on_delete=models.PROTECT, null=True, blank=True, related_name="review_cases"
    )
    operation = models.ForeignKey(
        Operation, on_delete=models.PROTECT, null=True, blank=True, related_name="review_cases"
    )
    summary = models.TextField(help_text="What happened and who should act.")
    evidence = models.JSONField(default=dict, blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="owned_cases",
    )
    resolution_code = models.CharField(max_length=50, blank=True)
    resolution_note = models.TextField(blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        permissions = [
            ("replay_operation", "Can replay an operation"),
            ("view_contact_details", "Can see unmasked contact details"),
            ("erase_personal_data", "Can export and erase a person's personal data"),
        ]
        constraints = [
            # Invariant 5: at most one open case per subject and kind.
            models.UniqueConstraint(
                fields=["subject", "kind"],
                condition=Q(status__in=["open", "in_progress"]),
                name="reviewcase_one_open_per_subject_kind",
            ),
            choices_valid("status", CaseStatus, "reviewcase_status_valid"),
            choices_valid("kind", CaseKind, "reviewcase_kind_valid"),
        ]
        indexes = [
            # Console queue: open cases, oldest first.
            models.Index(
                fields=["created_at", "id"],
                condition=Q(status__in=["open", "in_progress"]),
                name="reviewcase_open_queue_idx",
            ),
            # Console queue sorted by kind, then oldest.
            models.Index(
                fields=["kind", "created_at", "id"],
                condition=Q(status__in=["open", "in_progress"]),
                name="reviewcase_open_kind_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} ({self.subject})"

    @property
    def held_operation_ids(self) -> set[int]:
        """The later steps this case's operation holds, as named when it opened."""
        return {held["id"] for held in self.evidence.get("held_operations", [])}


class CaseRoute(models.Model):
    """Who receives a case: the review block's first matching route (or the group
    Reviewers), written once by the case's first routing; then moved only by a hand on,
    and stamped once by escalation. *Next case* gives a routed case first to its people."""

    case = models.OneToOneField(ReviewCase, on_delete=models.CASCADE, related_name="route")
    # The name the route gave ("Sales desk", "ana"): kept when the group or user goes.
    target = models.CharField(max_length=150)
    group = models.ForeignKey(
        "auth.Group", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    routed_at = models.DateTimeField()
    # Set by the one escalation a case gets (a conditional UPDATE: only one pass wins).
    escalated_at = models.DateTimeField(null=True, blank=True)
    escalated_to = models.CharField(max_length=150, blank=True)
    handed_on_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(group__isnull=True) | Q(user__isnull=True),
                name="caseroute_group_or_user",
            ),
        ]
        indexes = [
            # The escalation pass: routed cases not escalated yet, oldest first.
            models.Index(
                fields=["routed_at"],
                condition=Q(escalated_at__isnull=True),
                name="caseroute_unescalated_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"case {self.case_id} -> {self.target}"
