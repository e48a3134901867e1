"""*Hand on*: whoever holds a taken case gives it to the group that can decide it.

The case goes back to open and nobody's, routed to that group (first in their *Next
case*), and the group's people are notified (review/notifications.py): one decision,
audited as `case_handed_on` in the transaction that releases the case.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from idempotency_core.audit.cases import review_case_locked
from idempotency_core.audit.entries import case_audit
from idempotency_core.models import ReviewCase
from idempotency_core.review.notifications import case_hand_on_route, hand_on_group
from idempotency_core.review.refusals import CaseActionRefusedError


def case_hand_on(*, case_id: int, actor: User, reason: str) -> tuple[ReviewCase, str]:
    """Releases `actor`'s case to the group that can decide it; returns the case and the
    group's name. Refused unless the case is open and `actor` holds it."""
    reason = reason.strip()
    if not reason:
        raise CaseActionRefusedError("Give a reason: the next person reads why it came to them.")
    now = timezone.now()
    with transaction.atomic():
        case = review_case_locked(case_id, "event")
        if case.status not in ReviewCase.OPEN_STATUSES:
            raise CaseActionRefusedError(f"Case {case.pk} is already settled; nothing to hand on.")
        if case.owner_id != actor.pk:
            raise CaseActionRefusedError("Only whoever holds a case can hand it on: take it first.")
        group = hand_on_group(case)
        ReviewCase.objects.filter(pk=case.pk, owner=actor).update(
            owner=None, status=ReviewCase.Status.OPEN, updated_at=now
        )
        case_audit(
            case,
            action="case_handed_on",
            actor=actor,
            reason=reason,
            details={"to": group, "previous_owner": actor.get_username()},
        )
        case_hand_on_route(case=case, actor=actor, group_name=group, now=now)
    return case, group
