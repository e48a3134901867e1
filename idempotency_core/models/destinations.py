"""Where effects go: a destination, its shared request budget and its requests."""

from __future__ import annotations

from django.db import models

from idempotency_core.models.choices import DestinationKind, DestinationPause, choices_valid


class Destination(models.Model):
    """A configured adapter: which CRM or mail service, and where it answers. Its
    capabilities are not stored: the adapter derives and verifies them
    (execution/destinations.py), so nobody can type one the destination does not honour.
    """

    Kind = DestinationKind

    CRM_KINDS = (Kind.CRM_HTTP, Kind.HUBSPOT, Kind.SALESFORCE, Kind.PIPEDRIVE, Kind.DATAVERSE)
    EMAIL_KINDS = (Kind.SMTP, Kind.RESEND)

    name = models.SlugField(max_length=50, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    # Blank means the URL from settings (DESTINATION_URL / EMAIL_HOST, or the
    # vendor's own variable, e.g. HUBSPOT_BASE_URL, else its real URL).
    base_url = models.CharField(max_length=300, blank=True)

    class Meta:
        constraints = [
            choices_valid("kind", DestinationKind, "destination_kind_valid"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_crm(self) -> bool:
        return self.kind in self.CRM_KINDS


class DestinationBudget(models.Model):
    """A destination's request budget and pause, shared by every worker (execution/budget.py):
    a cell rate spreads requests, each moving `next_free_at` on by `spacing_seconds`
    (at most `tolerance_seconds` ahead of now), and the log of its requests
    (`DestinationRequest`) caps any rolling window at `requests`.
    """

    Pause = DestinationPause

    destination = models.OneToOneField(
        Destination, on_delete=models.CASCADE, primary_key=True, related_name="budget"
    )
    # The budget in force, and where it comes from: the vendor's documentation, an
    # ONEFOLD_RATE_LIMIT_<NAME> setting, or the destination's own headers.
    requests = models.PositiveIntegerField(null=True, blank=True)
    per_seconds = models.FloatField(null=True, blank=True)
    origin = models.CharField(max_length=20, blank=True)
    spacing_seconds = models.FloatField(default=0)
    tolerance_seconds = models.FloatField(default=0)
    next_free_at = models.DateTimeField(null=True, blank=True)
    paused_until = models.DateTimeField(null=True, blank=True)
    pause_kind = models.CharField(max_length=20, choices=Pause.choices, blank=True)
    pause_reason = models.TextField(blank=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    # 429s its answers gave: after the budget was learned from its headers or set by
    # the operator (a defect: the budget should have held), and before.
    rate_limited_known = models.PositiveIntegerField(default=0, db_default=0)
    rate_limited_unknown = models.PositiveIntegerField(default=0, db_default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"budget of {self.destination_id}"


class DestinationRequest(models.Model):
    """One request within a destination's rolling window (execution/budget.py), by the
    database's clock alone: sent no earlier than `at`, answered (so counted by the
    vendor) no later than `finished_at`; it holds a place in the window until
    `finished_at` plus the window. A row with `at` = `finished_at` stands for requests
    the vendor counted and Onefold did not send (its headers said so)."""

    destination = models.ForeignKey(Destination, on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # The budget's reservation: a destination's requests still in its window.
            models.Index(fields=["destination", "at"], name="destination_request_at"),
        ]

    def __str__(self) -> str:
        return f"request to {self.destination_id} at {self.at}"
