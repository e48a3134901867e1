"""Investigated merge of suspected duplicate records (docs/architecture.md, Flow step 7)."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from idempotency_core.audit.entries import audit_record
from idempotency_core.execution.destinations import capabilities_of, is_crm
from idempotency_core.execution.engine import operation_enqueue
from idempotency_core.execution.steps import MERGE_STEP
from idempotency_core.models import Attempt, Destination, Event, Operation, ReviewCase
from idempotency_core.review.refusals import MergeRefusedError

DUPLICATE_KINDS = (ReviewCase.Kind.SUSPECTED_DUPLICATE, ReviewCase.Kind.RECON_DUPLICATE)
# After every pipeline step, so that releasing "the next step" after a pipeline
# success never picks a merge, and a merge never waits for a pipeline step.
MERGE_POSITION = 100
SAME_RECORD_MESSAGE = (
    "You chose record {ref} on both sides. Pick the record that stays, and a different "
    "record to merge into it."
)


def merge_key(*, case_id: int, survivor_ref: str, duplicate_ref: str) -> str:
    """Stable for one decision (same case, same two records); opaque like operation keys."""
    message = f"{case_id}\x1f{survivor_ref}\x1f{duplicate_ref}".encode()
    return "opk_merge_" + hashlib.sha256(message).hexdigest()[:48]


def merge_destination(case: ReviewCase) -> Destination:
    """The CRM holding the records: the case operation's destination, else "crm"."""
    operation = case.operation
    if operation is not None and is_crm(operation.destination):
        return operation.destination
    return Destination.objects.get(name="crm")


def duplicate_record_refs(case: ReviewCase) -> list[str]:
    """CRM record ids a duplicate case is about, from whatever evidence it carries:
    record ids named directly, or the events whose enquiries created them."""
    evidence = case.evidence or {}
    refs: list[str] = [str(r) for r in evidence.get("record_ids") or []]
    refs += [str(r["id"]) for r in evidence.get("records") or [] if isinstance(r, dict)]
    for key in ("existing_id", "survivor_id", "duplicate_id"):
        if evidence.get(key):
            refs.append(str(evidence[key]))
    event_ids = [str(e) for e in evidence.get("event_ids") or []]
    if event_ids:
        by_event = {
            str(event_id): ref
            for event_id, ref in Operation.objects.filter(
                event_id__in=event_ids, step="create_enquiry", status=Operation.Status.SUCCEEDED
            ).values_list("event_id", "destination_ref")
        }
        refs += [by_event[e] for e in event_ids if by_event.get(e)]
    if evidence.get("external_ref"):
        found = Operation.objects.filter(key=evidence["external_ref"]).exclude(destination_ref="")
        refs += list(found.values_list("destination_ref", flat=True))
    return list(dict.fromkeys(r for r in refs if r))


def _merge_target(
    case: ReviewCase, *, survivor_ref: str, duplicate_ref: str
) -> tuple[Destination, Event]:
    """The CRM and the event a merge belongs to, or why this merge cannot be asked for."""
    if not survivor_ref or not duplicate_ref:
        raise MergeRefusedError("Pick two records: the one that stays and the one merged into it.")
    if survivor_ref == duplicate_ref:
        raise MergeRefusedError(SAME_RECORD_MESSAGE.format(ref=survivor_ref))
    if case.kind not in DUPLICATE_KINDS:
        raise MergeRefusedError("Only a suspected duplicate can be merged.")
    known = duplicate_record_refs(case)
    if known and not {survivor_ref, duplicate_ref} <= set(known):
        raise MergeRefusedError(
            f"The case names records {', '.join(known)}; merge only records it is about."
        )
    destination = merge_destination(case)
    if not capabilities_of(destination).merge:
        raise MergeRefusedError(f"{destination.name} does not support merging records.")
    # The merge belongs to the event whose record goes away: its history then
    # shows where its enquiry went.
    event = _event_of_record(duplicate_ref, case.event)
    if event is None:
        raise MergeRefusedError("No event is linked to these records; merge them in the CRM.")
    return destination, event


def _merge_operation_create(
    *,
    event: Event,
    destination: Destination,
    key: str,
    arguments: dict[str, Any],
    actor: User,
    now: datetime,
) -> Operation:
    """The merge's own operation; (event, step) is unique, so a second survivor for the
    same duplicate is refused rather than merged twice."""
    duplicate_ref = arguments["duplicate_ref"]
    try:
        with transaction.atomic():
            return Operation.objects.create(
                event=event,
                step=f"{MERGE_STEP}:{duplicate_ref}",
                position=MERGE_POSITION,
                destination=destination,
                key=key,
                arguments=arguments,
                next_attempt_at=now,
                next_trigger=Attempt.Trigger.REVIEWER,
                next_triggered_by=actor,
                enqueued_at=now,
            )
    except IntegrityError as exc:
        raise MergeRefusedError(
            f"A merge of {duplicate_ref} from this event was already requested with "
            "another survivor; see the case's audit trail."
        ) from exc


def _event_of_record(ref: str, fallback: Event | None) -> Event | None:
    operation = (
        Operation.objects.filter(step="create_enquiry", destination_ref=ref)
        .select_related("event")
        .first()
    )
    return operation.event if operation is not None else fallback


def duplicate_merge_request(
    *,
    case_id: int,
    survivor_ref: str,
    duplicate_ref: str,
    actor: User,
    reason: str,
) -> Operation:
    """Records the decision and queues the merge operation; a worker performs it.

    Asking twice for the same merge returns the operation already queued (its
    key and (event, step) are unique), so a double click merges once.
    """
    reason = reason.strip()
    survivor_ref, duplicate_ref = survivor_ref.strip(), duplicate_ref.strip()
    if not reason:
        raise MergeRefusedError("A merge needs a reason.")
    case = ReviewCase.objects.select_related("operation__destination", "event").get(pk=case_id)
    destination, event = _merge_target(case, survivor_ref=survivor_ref, duplicate_ref=duplicate_ref)
    key = merge_key(case_id=case.pk, survivor_ref=survivor_ref, duplicate_ref=duplicate_ref)
    arguments = {"case_id": case.pk, "survivor_ref": survivor_ref, "duplicate_ref": duplicate_ref}
    now = timezone.now()
    with transaction.atomic():
        locked = ReviewCase.objects.select_for_update(of=("self",)).get(pk=case.pk)
        if locked.status not in ReviewCase.OPEN_STATUSES:
            raise MergeRefusedError(f"Case {case.pk} is no longer open.")
        existing = Operation.objects.filter(key=key).first()
        if existing is not None:
            return existing
        _pair_guard(case, event, survivor_ref=survivor_ref, duplicate_ref=duplicate_ref)
        operation = _merge_operation_create(
            event=event,
            destination=destination,
            key=key,
            arguments=arguments,
            actor=actor,
            now=now,
        )
        ReviewCase.objects.filter(pk=case.pk).update(
            status=ReviewCase.Status.IN_PROGRESS,
            owner=locked.owner or actor,
            updated_at=now,
        )
        audit_record(
            action="merge_requested",
            actor=actor,
            case=case,
            operation=operation,
            reason=reason,
            details={**arguments, "merge_key": key},
        )
        # Same transaction as the operation row (ORM broker): no merge without its task.
        operation_enqueue(operation.pk)
    return operation


def _pair_guard(case: ReviewCase, event: Event, *, survivor_ref: str, duplicate_ref: str) -> None:
    """One unsettled merge per pair of records, in either direction, and none of a
    record already merged away; or MergeRefusedError.

    The pair's two events, which hold its merges, are locked in one order before the
    merges are read: two requests for a pair take turns, the second seeing the first's.
    """
    events = {event.pk, case.event_id, *(_event_ids_of_records([survivor_ref, duplicate_ref]))}
    event_ids = sorted(str(pk) for pk in events if pk is not None)
    list(Event.objects.select_for_update().filter(pk__in=event_ids).order_by("pk").values("pk"))
    pair = {survivor_ref, duplicate_ref}
    merges = (
        Operation.objects.filter(event_id__in=event_ids, step__startswith=f"{MERGE_STEP}:")
        .exclude(status=Operation.Status.CANCELLED)
        .order_by("pk")
    )
    for merge in merges:
        arguments = merge.arguments or {}
        theirs = {arguments.get("survivor_ref"), arguments.get("duplicate_ref")}
        if merge.status != Operation.Status.SUCCEEDED and theirs & pair:
            raise MergeRefusedError(
                f"A merge of {arguments.get('duplicate_ref')} into "
                f"{arguments.get('survivor_ref')} is already under way (case "
                f"#{arguments.get('case_id')}); wait for it to finish before asking for another."
            )
        if merge.status == Operation.Status.SUCCEEDED and arguments.get("duplicate_ref") in pair:
            raise MergeRefusedError(
                f"Record {arguments.get('duplicate_ref')} was already merged into "
                f"{arguments.get('survivor_ref')}; it no longer exists in the CRM."
            )


def _event_ids_of_records(refs: list[str]) -> list[Any]:
    return list(
        Operation.objects.filter(step="create_enquiry", destination_ref__in=refs).values_list(
            "event_id", flat=True
        )
    )
