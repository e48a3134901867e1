"""Settling an email that may or may not have gone out, with what a person can know."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from idempotency_core.audit.cases import (
    review_case_locked,
    review_case_settle,
    review_cases_in_progress,
)
from idempotency_core.audit.entries import audit_record
from idempotency_core.execution.engine import operation_enqueue
from idempotency_core.execution.outcomes import operation_release_next, operation_unhold_later
from idempotency_core.execution.steps import step_of
from idempotency_core.keys import operation_key
from idempotency_core.models import Attempt, Operation, ReviewCase
from idempotency_core.review.refusals import CaseActionRefusedError, require_reason

# After the pipeline, remaps (90) and merges (100): releasing "the next step"
# after a pipeline success never picks a send-again, nor the other way round.
SEND_AGAIN_POSITION = 110


def is_email_case(case: ReviewCase) -> bool:
    """A case about a send that cannot be recognised if repeated (an email)."""
    operation = case.operation
    return operation is not None and step_of(operation).at_most_once


def email_may_have_gone(case: ReviewCase) -> bool:
    """An email case where only the customer can say whether it arrived. A refused
    send (permanent failure) and a held one (Onefold never called the mail service)
    certainly did not go: a plain replay is the answer."""
    return is_email_case(case) and case.kind not in (
        ReviewCase.Kind.PERMANENT,
        ReviewCase.Kind.CONFIRMATION_HELD,
    )


def _locked_email_case(case_id: int, reason: str) -> tuple[ReviewCase, Operation, str]:
    reason = require_reason(reason)
    case = review_case_locked(case_id, "operation__event__source", "operation__destination")
    if case.status not in ReviewCase.OPEN_STATUSES:
        raise CaseActionRefusedError(f"Case {case.pk} is no longer open; nothing to do.")
    operation = case.operation
    if operation is None or not email_may_have_gone(case):
        raise CaseActionRefusedError("This case is not about an email that may have gone out.")
    operation = Operation.objects.select_for_update().get(pk=operation.pk)
    if operation.status != Operation.Status.NEEDS_REVIEW or operation.held_by_id is not None:
        raise CaseActionRefusedError(
            "This email is no longer waiting for a decision (it was sent again or settled)."
        )
    return case, operation, reason


def email_receipt_confirm(*, case_id: int, actor: User, reason: str) -> ReviewCase:
    """The customer has the email: the send is done. No reference is recorded (there
    is none to verify); the steps held behind it go on."""
    now = timezone.now()
    with transaction.atomic():
        case, operation, reason = _locked_email_case(case_id, reason)
        Operation.objects.filter(pk=operation.pk).update(
            status=Operation.Status.SUCCEEDED,
            recovery=Operation.Recovery.NONE,
            last_error="",
            next_attempt_at=None,
            completed_at=now,
            updated_at=now,
        )
        unheld = operation_unhold_later(operation, now=now)
        released = operation_release_next(operation, now=now)
        _receipt_settle(
            case,
            actor=actor,
            reason=reason,
            now=now,
            details={"unheld_operations": unheld, "released_operations": released},
        )
        _earlier_cases_settle(operation, actor=actor, reason=reason, now=now)
    case.refresh_from_db()
    return case


def _earlier_cases_settle(operation: Operation, *, actor: User, reason: str, now: datetime) -> None:
    """The cases of the sends this one repeats: the customer's receipt answers them too."""
    earlier = (operation.arguments or {}).get("settles_case_ids") or []
    for earlier_case in ReviewCase.objects.filter(
        pk__in=earlier, status__in=ReviewCase.OPEN_STATUSES
    ):
        _receipt_settle(earlier_case, actor=actor, reason=reason, now=now, operation=operation)


def _receipt_settle(
    case: ReviewCase,
    *,
    actor: User,
    reason: str,
    now: datetime,
    operation: Operation | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """A case resolved by the customer's receipt, and audited."""
    review_case_settle(
        case,
        code="customer_confirmed_receipt",
        action="email_receipt_confirmed",
        actor=actor,
        reason=reason,
        now=now,
        operation=operation,
        details=details,
    )


def email_send_again(*, case_id: int, actor: User, reason: str) -> Operation:
    """The customer did not get it: a new send with its own key, queued now."""
    now = timezone.now()
    with transaction.atomic():
        case, original, reason = _locked_email_case(case_id, reason)
        again = _send_again_create(case, original, actor=actor, now=now)
        # The first send is given up (its attempts stay); what waited behind it
        # goes back in line, as after a resolution.
        Operation.objects.filter(pk=original.pk).update(
            status=Operation.Status.CANCELLED,
            next_attempt_at=None,
            last_error=f"Not received by the customer; sent again as operation {again.pk}.",
            updated_at=now,
        )
        unheld = operation_unhold_later(original, now=now)
        released = operation_release_next(original, now=now)
        review_cases_in_progress([case.pk], actor=actor, now=now)
        audit_record(
            action="email_send_again",
            actor=actor,
            case=case,
            event=original.event,
            operation=again,
            reason=reason,
            details={
                "original_operation": original.pk,
                "original_key": original.key,
                "new_operation": again.pk,
                "new_key": again.key,
                "unheld_operations": unheld,
                "released_operations": released,
            },
        )
        # Same transaction as the operation row (ORM broker): no send without its task.
        operation_enqueue(again.pk)
    return again


def _send_again_create(
    case: ReviewCase, original: Operation, *, actor: User, now: datetime
) -> Operation:
    base = original.step.partition(":")[0]
    earlier = Operation.objects.filter(event_id=original.event_id, step__startswith=f"{base}:")
    number = earlier.count() + 2  # the first send is send 1
    step = f"{base}:{number}"
    event = original.event
    return Operation.objects.create(
        event=event,
        step=step,
        position=SEND_AGAIN_POSITION + number,
        destination=original.destination,
        key=operation_key(source_salt=event.source.key_salt, event_key=event.key, step=step),
        # A send again of a send again still answers the first case too.
        arguments={
            "settles_case_ids": [*(original.arguments or {}).get("settles_case_ids", []), case.pk],
            "sends_again": original.pk,
        },
        next_attempt_at=now,
        next_trigger=Attempt.Trigger.REVIEWER,
        next_triggered_by=actor,
        enqueued_at=now,
    )
