"""Investigated merge of suspected duplicate records (DESIGN.md, Flow 7).

Interim, synchronous version: the merge is called from the request, outside any
transaction, with its own stable key, so pressing the button twice (or a retry
after a lost answer) merges once at a CRM that honours idempotency keys, and the
sandbox answers 200 again for a duplicate already merged into the survivor.
The design wants the merge to be an operation executed by the workers; when the
engine offers that, this function should create the operation and enqueue it
instead of calling the CRM itself. Its signature is what the console relies on.
"""

from __future__ import annotations

import hashlib

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from idempotency_core.audit import audit_record
from idempotency_core.models import Destination, ReviewCase
from idempotency_core.pipeline import adapter_for
from integrations.base import DestinationError
from integrations.crm import CrmClient

DUPLICATE_KINDS = (ReviewCase.Kind.SUSPECTED_DUPLICATE, ReviewCase.Kind.RECON_DUPLICATE)


class MergeRefusedError(Exception):
    """The merge cannot be done; the message says why, for a person."""


def merge_key(*, case_id: int, survivor_ref: str, duplicate_ref: str) -> str:
    """Stable across retries of the same decision; opaque like operation keys."""
    message = f"{case_id}\x1f{survivor_ref}\x1f{duplicate_ref}".encode()
    return "opk_merge_" + hashlib.sha256(message).hexdigest()[:48]


def merge_destination(case: ReviewCase) -> Destination:
    """The CRM holding the records: the case operation's destination, else "crm"."""
    if case.operation_id is not None and case.operation.destination.kind == "crm_http":
        return case.operation.destination
    return Destination.objects.get(name="crm")


def duplicate_merge_request(
    *,
    case_id: int,
    survivor_ref: str,
    duplicate_ref: str,
    actor: AbstractBaseUser,
    reason: str,
) -> ReviewCase:
    """Merges `duplicate_ref` into `survivor_ref` at the CRM and resolves the case."""
    reason = reason.strip()
    survivor_ref, duplicate_ref = survivor_ref.strip(), duplicate_ref.strip()
    if not reason:
        raise MergeRefusedError("A merge needs a reason.")
    if not survivor_ref or not duplicate_ref or survivor_ref == duplicate_ref:
        raise MergeRefusedError("Pick two different records: one survivor, one duplicate.")
    case = ReviewCase.objects.select_related("operation__destination").get(pk=case_id)
    if case.kind not in DUPLICATE_KINDS:
        raise MergeRefusedError("Only a suspected duplicate can be merged.")
    if case.status not in ReviewCase.OPEN_STATUSES:
        raise MergeRefusedError(f"Case {case.pk} is no longer open.")
    known = [str(r) for r in (case.evidence or {}).get("record_ids") or []]
    if known and not {survivor_ref, duplicate_ref} <= set(known):
        raise MergeRefusedError(
            f"The case names records {', '.join(known)}; merge only records it is about."
        )
    destination = merge_destination(case)
    if not destination.merge:
        raise MergeRefusedError(f"{destination.name} does not support merging records.")
    key = merge_key(case_id=case.pk, survivor_ref=survivor_ref, duplicate_ref=duplicate_ref)
    details = {"survivor_ref": survivor_ref, "duplicate_ref": duplicate_ref, "merge_key": key}
    # Recorded (and committed) before the call: if the process dies during the
    # merge, the trail shows it was asked for and with which key.
    audit_record(
        action="merge_requested",
        actor=actor,
        case=case,
        event=case.event,
        operation=case.operation,
        reason=reason,
        details=details,
    )
    crm = adapter_for(destination)
    if not isinstance(crm, CrmClient):
        raise MergeRefusedError(f"{destination.name} is not a CRM.")
    try:
        effect = crm.merge_records(survivor_id=survivor_ref, duplicate_id=duplicate_ref, key=key)
    except DestinationError as exc:
        audit_record(
            action="merge_failed",
            actor=actor,
            case=case,
            event=case.event,
            reason=reason,
            details={**details, "error": exc.message, "classification": str(exc.classification)},
        )
        raise MergeRefusedError(f"The CRM did not merge: {exc.message}") from exc
    now = timezone.now()
    with transaction.atomic():
        ReviewCase.objects.filter(pk=case.pk, status__in=ReviewCase.OPEN_STATUSES).update(
            status=ReviewCase.Status.RESOLVED,
            resolution_code="merged",
            resolution_note=f"{duplicate_ref} merged into {survivor_ref}: {reason}",
            resolved_at=now,
            owner=case.owner or actor,
            updated_at=now,
        )
        audit_record(
            action="merged",
            actor=actor,
            case=case,
            event=case.event,
            operation=case.operation,
            reason=reason,
            details={**details, "survivor": effect.ref, "replayed": effect.adopted},
        )
    case.refresh_from_db()
    return case
