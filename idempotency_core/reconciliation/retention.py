"""Retention: how long payloads and keys are kept, and what a very late repeat does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from idempotency_core.audit.entries import audit_record
from idempotency_core.models import Delivery, Event, Operation, ReviewCase

SYSTEM = "retention"
ENQUIRY_STEP = "create_enquiry"


def payload_cutoff(now: datetime | None = None) -> datetime:
    return (now or timezone.now()) - timedelta(days=settings.ONEFOLD_PAYLOAD_RETENTION_DAYS)


# -- payload purge -----------------------------------------------------------------


@dataclass(frozen=True)
class PurgeReport:
    cutoff: datetime
    candidates: int
    purged: int
    dry_run: bool


def purgeable_events(*, cutoff: datetime) -> QuerySet[Event]:
    """Old events whose every operation is done: a step still to run, or waiting for
    a person (a replay, or the steps held behind it), needs the payload; so does an
    unreadable delivery waiting for a corrected map (its raw body is all there is)."""
    unfinished = Operation.objects.filter(event=OuterRef("pk")).exclude(status__in=Operation.DONE)
    unreadable = ReviewCase.objects.filter(
        event=OuterRef("pk"),
        kind=ReviewCase.Kind.UNREADABLE,
        status__in=ReviewCase.OPEN_STATUSES,
    )
    return Event.objects.filter(
        received_at__lt=cutoff, payload_purged_at__isnull=True, payload__isnull=False
    ).filter(~Exists(unfinished), ~Exists(unreadable))


def payloads_purge(
    *,
    dry_run: bool = False,
    batch_size: int = 1000,
    now: datetime | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> PurgeReport:
    """Nulls the payload of events past retention, in batches; keeps key and fingerprint.

    Each batch re-checks the conditions in its UPDATE, so an operation put back
    in flight (a replay) between selection and update keeps its payload.
    """
    now = now or timezone.now()
    cutoff = payload_cutoff(now)
    candidates = purgeable_events(cutoff=cutoff).count()
    purged = 0
    if not dry_run:
        while True:
            ids = list(
                purgeable_events(cutoff=cutoff)
                .order_by("received_at")
                .values_list("pk", flat=True)[:batch_size]
            )
            if not ids:
                break
            done = (
                purgeable_events(cutoff=cutoff)
                .filter(pk__in=ids)
                .update(payload=None, payload_purged_at=now)
            )
            # The raw deliveries of a hook hold the same contact details, and so does
            # what each operation sent (its rendered content: execution/content.py).
            Delivery.objects.filter(
                event_id__in=ids, event__payload__isnull=True, raw_body__isnull=False
            ).update(raw_body=None)
            Operation.objects.filter(
                event_id__in=ids, event__payload__isnull=True, content__isnull=False
            ).update(content=None)
            purged += done
            if progress is not None:
                progress(purged, candidates)
            if done == 0:  # every selected row changed state meanwhile
                break
        if purged:
            audit_record(
                action="payloads_purged",
                system=SYSTEM,
                reason=f"payload retention of {settings.ONEFOLD_PAYLOAD_RETENTION_DAYS} days",
                details={"purged": purged, "cutoff": cutoff.isoformat()},
            )
    return PurgeReport(cutoff=cutoff, candidates=candidates, purged=purged, dry_run=dry_run)
