"""What the source pages read: the last day's delivery outcomes by source, a source's
latest deliveries with their cases, and its latest refusal. Reads only."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from django.db.models import Sum

from idempotency_core.models import Delivery, ReviewCase, Source

RECENT_DELIVERIES = 50


def recent_outcomes(*, since: datetime) -> dict[int, list[dict[str, Any]]]:
    """source id -> its deliveries since `since` counted by outcome, one grouped query."""
    labels = dict(Delivery.Outcome.choices)
    rows = (
        Delivery.objects.filter(received_at__gte=since)
        .values("source_id", "outcome")
        # Receipts, not rows: a minute's failed verifications share one row.
        .annotate(n=Sum("receipts"))
        .order_by("source_id", "outcome")
    )
    counts: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        outcome = row["outcome"]
        counts[row["source_id"]].append(
            {
                "outcome": outcome,
                "label": labels.get(outcome, outcome),
                "badge": outcome_badge(outcome),
                "n": row["n"],
            }
        )
    return counts


def recent_deliveries(source: Source) -> list[Delivery]:
    """The last deliveries, each with `cases` (its event's review cases, maybe none).
    Only what the page shows is read: never `raw_body`, never the event's payload."""
    deliveries = list(
        Delivery.objects.filter(source=source)
        .only(
            "received_at", "outcome", "status_code", "verification", "receipts", "event", "source"
        )
        .order_by("-received_at", "-id")[:RECENT_DELIVERIES]
    )
    event_ids = {d.event_id for d in deliveries if d.event_id is not None}
    cases: dict[Any, list[int]] = defaultdict(list)
    for event_id, case_id in (
        ReviewCase.objects.filter(event_id__in=event_ids)
        .order_by("-created_at", "-id")
        .values_list("event_id", "pk")
    ):
        cases[event_id].append(case_id)
    for delivery in deliveries:
        delivery.cases = cases.get(delivery.event_id, [])  # type: ignore[attr-defined]
        delivery.badge = outcome_badge(delivery.outcome)  # type: ignore[attr-defined]
    return deliveries


def latest_refusal(source: Source) -> Delivery | None:
    """The source's latest failed verification, however long ago: why its sender is
    refused ("no Typeform-Signature header"), which the sender's own answer never says
    (every refusal, and an unknown source, get the same 401)."""
    # delivery_source_refused_idx: the newest row of a partial index, one probe.
    return (
        Delivery.objects.filter(source=source, outcome=Delivery.Outcome.UNAUTHORIZED)
        .only("received_at", "verification", "receipts", "source")
        .order_by("-received_at")
        .first()
    )


# A delivery outcome -> the console's badge colour (base.html): green taken, yellow
# to be retried by the sender, grey ignored, red refused.
OUTCOME_BADGES = {
    "accepted": "succeeded",
    "replayed": "succeeded",
    "disabled": "pending",
    "honeypot": "cancelled",
}


def outcome_badge(outcome: str) -> str:
    return OUTCOME_BADGES.get(outcome, "needs_review")
