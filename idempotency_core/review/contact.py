"""Revealing one submission's contact details to a reviewer who needs them."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User

from idempotency_core.audit.entries import audit_record
from idempotency_core.models import AuditEntry, Event, ReviewCase
from idempotency_core.review.refusals import CaseActionRefusedError

REVEAL_ACTION = "contact_revealed"
# A working day: long enough to call back, short enough that a reveal is not forever.
REVEAL_HOURS = 8
REVEAL_WINDOW = timedelta(hours=REVEAL_HOURS)


def contact_reveal(
    *, event: Event, actor: User, reason: str, case: ReviewCase | None = None
) -> AuditEntry:
    """Reveals `event`'s contact details to `actor` for REVEAL_HOURS, audited."""
    reason = " ".join(reason.split())
    if not reason:
        raise CaseActionRefusedError("Say why you need the contact details: it is recorded.")
    return audit_record(
        action=REVEAL_ACTION,
        actor=actor,
        case=case,
        event=event,
        reason=reason[:500],
        details={"hours": REVEAL_HOURS},
    )
