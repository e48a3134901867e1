"""Opening review cases: at most one open case per subject and kind (invariant 5)."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from idempotency_core.audit import audit_record
from idempotency_core.models import Event, Operation, ReviewCase


def operation_subject(operation: Operation) -> str:
    return f"operation:{operation.pk}"


def review_case_open(
    *,
    kind: str,
    subject: str,
    summary: str,
    event: Event | None = None,
    operation: Operation | None = None,
    evidence: dict[str, Any] | None = None,
    system: str,
) -> tuple[ReviewCase, bool]:
    """Opens a case, or returns the open one for this subject and kind.

    The partial unique constraint decides between concurrent openers; the loser
    reads the winner's case instead of failing.
    """
    if event is None and operation is not None:
        event = operation.event
    try:
        with transaction.atomic():
            case = ReviewCase.objects.create(
                kind=kind,
                subject=subject,
                summary=summary,
                event=event,
                operation=operation,
                evidence=evidence or {},
            )
    except IntegrityError:
        case = ReviewCase.objects.get(
            subject=subject, kind=kind, status__in=ReviewCase.OPEN_STATUSES
        )
        return case, False
    audit_record(
        action="case_opened",
        system=system,
        case=case,
        event=event,
        operation=operation,
        reason=summary,
        details={"kind": kind, "subject": subject},
    )
    return case, True
