"""Retention: how long payloads and keys are kept, and what a very late repeat does.

- **Payloads** (contact details, message, extra fields) are nulled
  ONEFOLD_PAYLOAD_RETENTION_DAYS after their event arrived, once none of its
  operations is still in flight (pending, running, retry scheduled). The key,
  the fingerprint, the operations, deliveries, attempts, cases and audit stay,
  so a repeat is still recognised and the history still reads. A replay after
  the purge fails permanently ("payload purged") rather than send blanks.
- **Keys.** Event rows are never deleted: review cases and the append-only
  audit trail refer to them. A key has *expired* once its event is older than
  ONEFOLD_KEY_RETENTION_DAYS; by then its payload is long gone (the payload
  period may not exceed the key period). A delivery for an expired key is
  answered from the stored event as any repeat, and never processed again;
  first, Onefold looks the destination up by the create_enquiry operation key
  (derived from source, event key and step, so it is the same key the original
  run presented). A record found there opens a LATE_REPLAY review case: the
  sender repeated (or reused) a very old key and the CRM already holds the
  enquiry, so nothing is created and nothing is duplicated. A failed lookup
  opens the case too (a person checks). No record found is audited only: the
  original event's own history says what happened to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from idempotency_core.audit.cases import review_case_open
from idempotency_core.audit.entries import audit_record
from idempotency_core.execution.steps import adapter_for, destination_for
from idempotency_core.keys import operation_key
from idempotency_core.models import Event, Operation, ReviewCase
from integrations.base import DestinationError
from integrations.sandbox.adapter import CrmClient

SYSTEM = "retention"
ENQUIRY_STEP = "create_enquiry"


def payload_cutoff(now: datetime | None = None) -> datetime:
    return (now or timezone.now()) - timedelta(days=settings.ONEFOLD_PAYLOAD_RETENTION_DAYS)


def key_expiry_cutoff(now: datetime | None = None) -> datetime:
    return (now or timezone.now()) - timedelta(days=settings.ONEFOLD_KEY_RETENTION_DAYS)


def key_expired(event: Event, *, now: datetime | None = None) -> bool:
    """True once the event is older than the key retention period."""
    return event.received_at < key_expiry_cutoff(now)


# -- payload purge -----------------------------------------------------------------


@dataclass(frozen=True)
class PurgeReport:
    cutoff: datetime
    candidates: int
    purged: int
    dry_run: bool


def purgeable_events(*, cutoff: datetime) -> QuerySet[Event]:
    """Old events whose every operation is done: a step still to run, or waiting for
    a person (a replay, or the steps held behind it), needs the payload."""
    unfinished = Operation.objects.filter(event=OuterRef("pk")).exclude(status__in=Operation.DONE)
    return Event.objects.filter(
        received_at__lt=cutoff, payload_purged_at__isnull=True, payload__isnull=False
    ).filter(~Exists(unfinished))


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


# -- late replay -------------------------------------------------------------------


def late_replay_check(*, event: Event, fingerprint: str) -> ReviewCase | None:
    """Called by `event_ingest` for every repeat delivery; acts only on an expired key.

    Runs outside any transaction (it calls the destination). Returns the
    LATE_REPLAY case when one is open for this event.
    """
    if not key_expired(event):
        return None
    source = event.source
    operation = event.operations.filter(step=ENQUIRY_STEP).select_related("destination").first()
    # The key the original run presented (derived, so an edit, which has no enquiry
    # operation, still finds a stray record).
    reference = operation_key(source_salt=source.key_salt, event_key=event.key, step=ENQUIRY_STEP)
    destination = operation.destination if operation else destination_for(source, "crm")
    record_id, lookup_error = None, ""
    adapter = adapter_for(destination)
    if isinstance(adapter, CrmClient):
        try:
            record_id = adapter.find_record(external_ref=reference)
        except DestinationError as exc:
            lookup_error = exc.message
    else:
        lookup_error = f"destination {destination.name} offers no lookup"
    age_days = (timezone.now() - event.received_at).days
    evidence = {
        "external_ref": reference,
        "destination": destination.name,
        "record_id": record_id,
        "lookup_error": lookup_error,
        "fingerprint_matched": fingerprint == event.fingerprint,
        "event_received_at": event.received_at.isoformat(),
        "key_retention_days": settings.ONEFOLD_KEY_RETENTION_DAYS,
    }
    if record_id is None and not lookup_error:
        audit_record(
            action="late_replay_checked",
            system=SYSTEM,
            event=event,
            operation=operation,
            reason="expired key repeated; the destination holds no record for it",
            details=evidence,
        )
        return None
    if record_id is not None:
        summary = (
            f"A delivery arrived for key {event.key!r} {age_days} days after its event; the key "
            f"expired after {settings.ONEFOLD_KEY_RETENTION_DAYS} days. {destination.name} "
            f"already holds record {record_id} with this event's reference, so nothing was "
            "created (not a duplicate). If the sender meant a new enquiry, it must send it "
            "under a new key."
        )
    else:
        summary = (
            f"A delivery arrived for key {event.key!r} {age_days} days after its event (key "
            f"expired); looking {destination.name} up by its reference failed ({lookup_error}). "
            "Nothing was created: check the CRM by hand."
        )
    case, _ = review_case_open(
        kind=ReviewCase.Kind.LATE_REPLAY,
        subject=f"event:{event.pk}",
        summary=summary,
        event=event,
        operation=operation,
        evidence=evidence,
        system=SYSTEM,
    )
    return case
