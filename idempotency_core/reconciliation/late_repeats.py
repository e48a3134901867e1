"""A delivery for an expired key: answered from the stored event, then checked."""

from __future__ import annotations

from django.conf import settings
from django.utils import timezone

from idempotency_core.audit.cases import review_case_open
from idempotency_core.audit.entries import audit_record
from idempotency_core.audit.subjects import event_subject
from idempotency_core.execution.destinations import NotACrmError, crm_adapter_for, destination_for
from idempotency_core.keys import operation_key
from idempotency_core.models import Delivery, Destination, Event, ReviewCase
from integrations.base import DestinationError

SYSTEM = "retention"
ENQUIRY_STEP = "create_enquiry"


def late_repeat_check(*, delivery_id: int) -> ReviewCase | None:
    """Looks the destination up for a late repeat; returns the LATE_REPLAY case, if any.

    Runs in a worker, outside any transaction (it calls the destination). Safe to
    run twice: the case is opened once per event (invariant 5).
    """
    delivery = Delivery.objects.select_related("event__source").get(pk=delivery_id)
    event = delivery.event
    if event is None:
        return None
    operation = event.operations.filter(step=ENQUIRY_STEP).select_related("destination").first()
    # The key the original run presented (derived, so an edit, which has no enquiry
    # operation, still finds a stray record).
    source = event.source
    reference = operation_key(source_salt=source.key_salt, event_key=event.key, step=ENQUIRY_STEP)
    destination = operation.destination if operation else destination_for(source, "crm")
    record_id, lookup_error = _find_record(destination, reference)
    evidence = {
        "external_ref": reference,
        "destination": destination.name,
        "record_id": record_id,
        "lookup_error": lookup_error,
        "fingerprint_matched": delivery.payload_matched,
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
    case, _ = review_case_open(
        kind=ReviewCase.Kind.LATE_REPLAY,
        subject=event_subject(event.pk),
        summary=_summary(event, destination, record_id=record_id, lookup_error=lookup_error),
        event=event,
        operation=operation,
        evidence=evidence,
        system=SYSTEM,
    )
    return case


def _find_record(destination: Destination, reference: str) -> tuple[str | None, str]:
    """(record id or None, why the lookup failed or "")."""
    try:
        return crm_adapter_for(destination).find_record(external_ref=reference), ""
    except NotACrmError:
        return None, f"destination {destination.name} offers no lookup"
    except DestinationError as exc:
        return None, exc.message


def _summary(
    event: Event, destination: Destination, *, record_id: str | None, lookup_error: str
) -> str:
    age_days = (timezone.now() - event.received_at).days
    if record_id is not None:
        return (
            f"A delivery arrived for key {event.key!r} {age_days} days after its event; the key "
            f"expired after {settings.ONEFOLD_KEY_RETENTION_DAYS} days. {destination.name} "
            f"already holds record {record_id} with this event's reference, so nothing was "
            "created (not a duplicate). If the sender meant a new enquiry, it must send it "
            "under a new key."
        )
    return (
        f"A delivery arrived for key {event.key!r} {age_days} days after its event (key "
        f"expired); looking {destination.name} up by its reference failed ({lookup_error}). "
        "Nothing was created: check the CRM by hand."
    )
