"""The records a suspected-duplicate case is about, fetched from the CRM for a reviewer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from idempotency_core.execution.destinations import NotACrmError, crm_adapter_for
from idempotency_core.models import Destination, Operation, ReviewCase
from idempotency_core.review.merge import duplicate_record_refs, merge_destination
from integrations.base import CrmAdapter, DestinationError


@dataclass
class FetchedRecord:
    """One record as the CRM holds it now (None, with `error`, when it could not be had),
    and the operation whose reference it carries."""

    ref: str
    record: dict[str, Any] | None
    error: str = ""
    operation: Operation | None = None


def duplicate_records_fetch(case: ReviewCase) -> list[FetchedRecord]:
    """Each record the case names, read from the CRM, in the order the case gives."""
    try:
        crm: CrmAdapter | None = crm_adapter_for(merge_destination(case))
    except (Destination.DoesNotExist, NotACrmError):
        crm = None
    return [_fetch(crm, ref) for ref in duplicate_record_refs(case)]


def _fetch(crm: CrmAdapter | None, ref: str) -> FetchedRecord:
    if crm is None:
        return FetchedRecord(ref, None, "no CRM destination is configured")
    try:
        record = crm.get_record(ref)
    except DestinationError as exc:
        return FetchedRecord(ref, None, f"the CRM did not answer: {exc}")
    if record is None:
        return FetchedRecord(ref, None, "not found in the CRM (deleted?)")
    operation = None
    if record.get("external_ref"):
        operation = (
            Operation.objects.select_related("event__source")
            .filter(key=record["external_ref"])
            .first()
        )
    return FetchedRecord(ref, record, operation=operation)
