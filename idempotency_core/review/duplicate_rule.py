"""A reviewer's decision when the CRM's own duplicate rule refused a create."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from idempotency_core.audit.cases import review_case_settle
from idempotency_core.audit.entries import audit_record
from idempotency_core.models import Operation, ReviewCase
from idempotency_core.review.cases import open_case_of_kind, operation_complete
from idempotency_core.review.refusals import CaseActionRefusedError, require_reason
from idempotency_core.review.replay import REPLAY_PERMISSION, operation_replay

RULE_KIND = ReviewCase.Kind.DUPLICATE_RULE


def matched_records(case: ReviewCase) -> list[str]:
    """The records the destination named, as the case's evidence holds them."""
    return [str(ref) for ref in (case.evidence or {}).get("matched_records") or []]


def create_anyway_offered(case: ReviewCase) -> bool:
    return bool((case.evidence or {}).get("create_anyway"))


def _rule_case(case_id: int) -> tuple[ReviewCase, Operation]:
    return open_case_of_kind(
        case_id,
        RULE_KIND,
        "Only an enquiry the CRM matched to an existing record can be decided this way.",
    )


def duplicate_rule_link(*, case_id: int, actor: User, record_id: str, reason: str) -> ReviewCase:
    """'Link to record X': the enquiry is the matched record; nothing new is created."""
    reason = require_reason(reason)
    record_id = record_id.strip()
    now = timezone.now()
    with transaction.atomic():
        case, operation = _rule_case(case_id)
        if record_id not in matched_records(case):
            raise CaseActionRefusedError(
                f"{record_id or 'That record'} is not one of the records the CRM matched: "
                f"{', '.join(matched_records(case)) or 'none'}."
            )
        completed, unheld, released = operation_complete(
            operation, destination_ref=record_id, now=now
        )
        if not completed:
            raise CaseActionRefusedError(
                "The enquiry is no longer waiting for this decision (a replay moved it on)."
            )
        review_case_settle(
            case,
            code="linked_to_match",
            note=f"{record_id}: {reason}",
            action="duplicate_rule_linked",
            actor=actor,
            reason=reason,
            now=now,
            details={
                "destination_ref": record_id,
                "matched_records": matched_records(case),
                "unheld_operations": unheld,
                "released_operations": released,
            },
        )
    case.refresh_from_db()
    return case


def duplicate_rule_create_anyway(*, case_id: int, actor: User, reason: str) -> ReviewCase:
    """'Create anyway': the create is sent again with its original key, allowing a
    duplicate. Refused unless the rule only alerts; a replay's refusals apply too."""
    if not actor.has_perm(REPLAY_PERMISSION):
        raise PermissionDenied("Creating anyway needs the replay permission (Replay admins).")
    reason = require_reason(reason)
    with transaction.atomic():
        case, operation = _rule_case(case_id)
        if not create_anyway_offered(case):
            raise CaseActionRefusedError(
                "The CRM's duplicate rule blocks this create: it refuses it even when told "
                "to allow a duplicate. Link the enquiry to the matched record instead."
            )
        Operation.objects.filter(pk=operation.pk).update(allow_duplicate=True)
        audit_record(
            action="duplicate_rule_create_anyway",
            actor=actor,
            case=case,
            operation=operation,
            reason=reason,
            details={"matched_records": matched_records(case)},
        )
        # A refusal of the replay rolls the mark back with it.
        operation_replay(operation_id=operation.pk, actor=actor, reason=reason)
    case.refresh_from_db()
    return case
