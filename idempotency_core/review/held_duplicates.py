"""A reviewer's decision on a suspected duplicate held before the write."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from idempotency_core.audit.cases import review_case_settle
from idempotency_core.execution.engine import operation_enqueue
from idempotency_core.execution.outcomes import operation_unhold_later
from idempotency_core.models import Attempt, Operation, ReviewCase
from idempotency_core.review.cases import open_case_of_kind
from idempotency_core.review.refusals import CaseActionRefusedError, require_reason

HELD_KIND = ReviewCase.Kind.DUPLICATE_HELD


def _held_case(case_id: int) -> tuple[ReviewCase, Operation]:
    return open_case_of_kind(
        case_id,
        HELD_KIND,
        "Only a submission held as a suspected duplicate can be decided this way.",
    )


def held_duplicate_separate(*, case_id: int, actor: User, reason: str) -> ReviewCase:
    """'Separate enquiry': the held submission is written as usual."""
    reason = require_reason(reason)
    now = timezone.now()
    with transaction.atomic():
        case, first = _held_case(case_id)
        released = Operation.objects.filter(
            pk=first.pk, status=Operation.Status.NEEDS_REVIEW, held_by__isnull=True
        ).update(
            status=Operation.Status.PENDING,
            next_attempt_at=now,
            enqueued_at=now,
            next_trigger=Attempt.Trigger.REVIEWER,
            next_triggered_by=actor,
            last_error="",
            updated_at=now,
        )
        unheld = operation_unhold_later(first, now=now)
        if released:
            operation_enqueue(first.pk)  # the ORM broker: queued with this commit
        review_case_settle(
            case,
            code="separate_enquiry",
            action="duplicate_released",
            actor=actor,
            reason=reason,
            now=now,
            details={
                "event_ids": case.evidence.get("event_ids", []),
                "released_operation": first.pk if released else None,
                "unheld_operations": unheld,
            },
        )
    case.refresh_from_db()
    return case


def held_duplicate_link(*, case_id: int, actor: User, reason: str) -> ReviewCase:
    """'Same enquiry': the held submission is linked to the first; nothing is written."""
    reason = require_reason(reason)
    now = timezone.now()
    with transaction.atomic():
        case, operation = _held_case(case_id)
        first_event_id = _linked_root((case.evidence.get("event_ids") or [""])[0])
        references = _first_submission_references(first_event_id)
        # Every step of the held submission never tried (a step tried meanwhile, after
        # a replay from this case, may be in the CRM: it is left to run its course).
        held = Operation.objects.select_for_update().filter(
            event_id=operation.event_id,
            status__in=[Operation.Status.NEEDS_REVIEW, *Operation.CLAIMABLE],
            attempt_count=0,
        )
        cancelled = list(held.order_by("position").values_list("pk", flat=True))
        Operation.objects.filter(pk__in=cancelled).update(
            status=Operation.Status.CANCELLED,
            held_by=None,
            next_attempt_at=None,
            enqueued_at=None,
            last_error=(
                f"Same enquiry as submission {first_event_id}: linked to it by a reviewer, "
                "not written again."
            ),
            completed_at=now,
            updated_at=now,
        )
        review_case_settle(
            case,
            code="same_enquiry",
            action="duplicate_linked",
            actor=actor,
            reason=reason,
            now=now,
            details={
                "linked_event": first_event_id,
                "linked_references": references,
                "cancelled_operations": cancelled,
            },
        )
    case.refresh_from_db()
    return case


def _first_submission_references(event_id: str) -> dict[str, Any]:
    """The first submission's steps as {step: {status, destination_ref}}. Refused when
    its first step will never be written (cancelled): linking would lose both."""
    rows = list(
        Operation.objects.filter(event_id=event_id)
        .order_by("position")
        .values_list("step", "status", "destination_ref")
    )
    if not rows:
        raise CaseActionRefusedError("The first submission of this pair is no longer stored.")
    if rows[0][1] == Operation.Status.CANCELLED:
        raise CaseActionRefusedError(
            "The first submission's enquiry was cancelled and will not be written: linking "
            "to it would lose this one. Choose 'Separate enquiry' instead."
        )
    return {step: {"status": status, "destination_ref": ref} for step, status, ref in rows}


def _linked_root(event_id: str) -> str:
    """The submission `event_id` was itself linked to, if it was (a third click held
    behind a second one already linked to the first): the one that was written."""
    for _ in range(10):  # a chain of linked submissions; each link points earlier
        linked = (
            ReviewCase.objects.filter(
                kind=HELD_KIND, event_id=event_id, resolution_code="same_enquiry"
            )
            .values_list("evidence", flat=True)
            .first()
        )
        if not linked:
            return event_id
        event_id = str(linked["event_ids"][0])
    return event_id
