"""Review case services: what a reviewer decides about a case (DESIGN.md, Flow 7).

Every function here is a decision a person makes, so each one guards the state
it changes (only open cases move; a conditional UPDATE decides between two
reviewers clicking at once) and writes an audit entry in the same transaction.
Network calls (verifying a reference, looking an effect up) happen before the
transaction opens, never inside it.

Replay lives in `replay.py` and merges in `merge.py`; they share the guards of
automatic processing and are called by the console like these.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from idempotency_core.audit.cases import review_cases_settle
from idempotency_core.audit.entries import audit_record
from idempotency_core.execution.engine import operation_release_next, operation_unhold_later
from idempotency_core.execution.steps import adapter_for, step_context, step_of
from idempotency_core.models import AuditEntry, Operation, ReviewCase
from idempotency_core.review.merge import DUPLICATE_KINDS
from integrations.base import DestinationError
from integrations.sandbox.adapter import CrmClient

logger = logging.getLogger(__name__)

# Closing a case ends it without the effect having been proven; the code says why.
RESOLUTION_CODES: dict[str, str] = {
    "handled_elsewhere": "Handled outside Onefold (by phone, in the CRM by hand)",
    "customer_withdrew": "The customer withdrew or no longer needs it",
    "spam_or_test": "Spam or test submission",
    "duplicate_submission": "The person submitted the same request twice",
    "not_fixable": "Cannot be fixed (data invalid, destination retired)",
    "other": "Other (explained in the reason)",
}


# How far back from the first presentation the listing scan starts: clocks of
# Onefold and the destination may disagree a little.
_LISTING_SLACK = timedelta(minutes=10)
_LISTING_MAX_PAGES = 20


class CaseActionRefusedError(Exception):
    """The action cannot be done on this case now; the message says why, for a person."""


@dataclass(frozen=True)
class OwnershipResult:
    taken: list[int]
    skipped: list[int]


@dataclass(frozen=True)
class LookupResult:
    """What the destination said about an operation's effect.

    `found` is True (the effect exists, `refs` names it), False (looked and it is
    absent) or None (the destination cannot say; the reviewer must check by hand).
    """

    found: bool | None
    method: str
    message: str
    refs: list[str] = field(default_factory=list)

    def as_details(self) -> dict[str, Any]:
        return asdict(self)


def _require_reason(reason: str) -> str:
    reason = reason.strip()
    if not reason:
        raise CaseActionRefusedError("Give a reason: the audit trail records why, not only what.")
    return reason


def _locked_open_case(case_id: int) -> ReviewCase:
    # `of=self`: PostgreSQL cannot lock the nullable side of the outer join.
    case = (
        ReviewCase.objects.select_for_update(of=("self",))
        .select_related("operation")
        .get(pk=case_id)
    )
    if case.status not in ReviewCase.OPEN_STATUSES:
        raise CaseActionRefusedError(
            f"Case {case.pk} is already {case.get_status_display().lower()}; nothing to do."
        )
    return case


def case_take_ownership(
    *,
    case_ids: Sequence[int],
    actor: AbstractBaseUser,
    reason: str = "",
    take_over: bool = False,
) -> OwnershipResult:
    """Makes `actor` the owner of open cases. Cases owned by someone else are
    skipped unless `take_over` is set, so a bulk action never silently steals work."""
    taken: list[int] = []
    skipped: list[int] = []
    now = timezone.now()
    with transaction.atomic():
        cases = list(
            ReviewCase.objects.select_for_update(of=("self",))
            .filter(pk__in=list(case_ids))
            .select_related("owner")
            .order_by("pk")
        )
        found = {case.pk for case in cases}
        skipped.extend(pk for pk in case_ids if pk not in found)
        for case in cases:
            if case.status not in ReviewCase.OPEN_STATUSES:
                skipped.append(case.pk)
                continue
            if case.owner_id == actor.pk:
                skipped.append(case.pk)
                continue
            if case.owner_id is not None and not take_over:
                skipped.append(case.pk)
                continue
            previous = case.owner.get_username() if case.owner is not None else ""
            ReviewCase.objects.filter(pk=case.pk).update(
                owner=actor, status=ReviewCase.Status.IN_PROGRESS, updated_at=now
            )
            audit_record(
                action="case_taken",
                actor=actor,
                case=case,
                event=case.event,
                operation=case.operation,
                reason=reason.strip(),
                details={"previous_owner": previous},
            )
            taken.append(case.pk)
    return OwnershipResult(taken=taken, skipped=skipped)


def case_mark_resolved(
    *, case_id: int, actor: AbstractBaseUser, destination_ref: str, reason: str
) -> ReviewCase:
    """Resolves a case with the destination reference the reviewer verified.

    When the case holds an operation waiting for review, the reference proves
    its effect exists: the operation becomes succeeded with that reference and
    the next step of the pipeline is released, exactly as after a successful
    attempt. A CRM record reference is checked against the CRM first, so a typo
    cannot mark an absent effect as done.
    """
    reason = _require_reason(reason)
    destination_ref = destination_ref.strip()
    if not destination_ref:
        raise CaseActionRefusedError("Give the reference you verified in the destination.")
    case = ReviewCase.objects.select_related("operation__destination").get(pk=case_id)
    if case.status not in ReviewCase.OPEN_STATUSES:
        raise CaseActionRefusedError(f"Case {case.pk} is no longer open.")
    verification = _verify_reference(case.operation, destination_ref)  # network: before the lock
    now = timezone.now()
    with transaction.atomic():
        case = _locked_open_case(case_id)
        operation = case.operation
        operation_completed = False
        released: list[int] = []
        unheld: list[int] = []
        if operation is not None:
            # Conditional: a replay or a worker may have moved the operation on
            # since the page was rendered; then the reference is only evidence.
            operation_completed = bool(
                Operation.objects.filter(
                    pk=operation.pk, status=Operation.Status.NEEDS_REVIEW, held_by__isnull=True
                ).update(
                    status=Operation.Status.SUCCEEDED,
                    destination_ref=destination_ref,
                    recovery=Operation.Recovery.NONE,
                    last_error="",
                    next_attempt_at=None,
                    completed_at=now,
                    updated_at=now,
                )
            )
            if operation_completed:
                # The reviewer's verified reference is the success: the steps it
                # held go back in line and the pipeline carries on.
                unheld = operation_unhold_later(operation, now=now)
                released = operation_release_next(operation, now=now)
        review_cases_settle(
            ReviewCase.objects.filter(pk=case.pk),
            status=ReviewCase.Status.RESOLVED,
            code="verified_in_destination",
            note=f"{destination_ref}: {reason}",
            now=now,
            actor=actor,
        )
        audit_record(
            action="case_resolved",
            actor=actor,
            case=case,
            event=case.event,
            operation=operation,
            reason=reason,
            details={
                "destination_ref": destination_ref,
                "verification": verification,
                "operation_completed": operation_completed,
                "unheld_operations": unheld,
                "released_operations": released,
            },
        )
    case.refresh_from_db()
    return case


def case_close(
    *, case_id: int, actor: AbstractBaseUser, resolution_code: str, reason: str
) -> ReviewCase:
    """Closes a case without the effect: the reviewer decided it will not happen.

    An operation still waiting for review is cancelled, and so are the later
    steps of its event that have not run, including those it held (a task or a
    confirmation cannot follow an enquiry that was given up). Nothing already
    done is undone.
    """
    reason = _require_reason(reason)
    if resolution_code not in RESOLUTION_CODES:
        raise CaseActionRefusedError(f"Unknown resolution code {resolution_code!r}.")
    now = timezone.now()
    with transaction.atomic():
        case = _locked_open_case(case_id)
        cancelled: list[int] = []
        operation = case.operation
        if operation is not None and operation.status == Operation.Status.NEEDS_REVIEW:
            later = Operation.objects.select_for_update().filter(
                event_id=operation.event_id,
                position__gte=operation.position,
                status__in=[
                    Operation.Status.NEEDS_REVIEW,
                    Operation.Status.PENDING,
                    Operation.Status.RETRY_SCHEDULED,
                ],
            )
            cancelled = list(later.values_list("pk", flat=True))
            Operation.objects.filter(pk__in=cancelled).update(
                status=Operation.Status.CANCELLED,
                held_by=None,
                next_attempt_at=None,
                enqueued_at=None,
                updated_at=now,
            )
        review_cases_settle(
            ReviewCase.objects.filter(pk=case.pk),
            status=ReviewCase.Status.CLOSED,
            code=resolution_code,
            note=reason,
            now=now,
            actor=actor,
        )
        audit_record(
            action="case_closed",
            actor=actor,
            case=case,
            event=case.event,
            operation=operation,
            reason=reason,
            details={"resolution_code": resolution_code, "cancelled_operations": cancelled},
        )
    case.refresh_from_db()
    return case


def case_mark_not_duplicate(*, case_id: int, actor: AbstractBaseUser, reason: str) -> ReviewCase:
    """Resolves a suspected duplicate as two genuine, separate records: nothing merges."""
    reason = _require_reason(reason)
    now = timezone.now()
    with transaction.atomic():
        case = _locked_open_case(case_id)
        if case.kind not in DUPLICATE_KINDS:
            raise CaseActionRefusedError("Only a suspected duplicate can be 'not a duplicate'.")
        review_cases_settle(
            ReviewCase.objects.filter(pk=case.pk),
            status=ReviewCase.Status.RESOLVED,
            code="not_duplicate",
            note=reason,
            now=now,
            actor=actor,
        )
        audit_record(
            action="not_duplicate",
            actor=actor,
            case=case,
            event=case.event,
            operation=case.operation,
            reason=reason,
            details={"evidence": case.evidence},
        )
    case.refresh_from_db()
    return case


def operation_destination_lookup(
    *, operation_id: int, actor: AbstractBaseUser, case: ReviewCase | None = None
) -> LookupResult:
    """Asks the destination whether the operation's effect exists, and audits the answer.

    Uses the destination's lookup by external reference where it has one. A CRM
    without lookup still exports its records, so for an enquiry the listing is
    scanned from just before the key was first presented. Email cannot be
    looked up: the result says what to check by hand.
    """
    operation = Operation.objects.select_related("event__source", "destination").get(
        pk=operation_id
    )
    result = _lookup(operation)
    audit_record(
        action="destination_lookup",
        actor=actor,
        case=case,
        operation=operation,
        details=result.as_details(),
    )
    return result


def latest_lookup(operation: Operation) -> AuditEntry | None:
    """The last recorded lookup of this operation's effect, shown on the case page."""
    return (
        AuditEntry.objects.filter(operation=operation, action="destination_lookup")
        .order_by("-at", "-pk")
        .first()
    )


def lookup_can_answer(operation: Operation) -> bool:
    """Whether `operation_destination_lookup` can tell if this operation's effect exists:
    by the destination's lookup, or (an enquiry in a CRM without one) its listing."""
    destination = operation.destination
    if destination.kind != destination.Kind.CRM_HTTP:
        return False
    try:
        step = step_of(operation)
    except KeyError:
        return False
    return (destination.lookup and step.find is not None) or operation.step == "create_enquiry"


def _lookup(operation: Operation) -> LookupResult:
    try:
        step = step_of(operation)
    except KeyError:
        return LookupResult(None, "none", f"Unknown step {operation.step}; check by hand.")
    destination = operation.destination
    if destination.kind == destination.Kind.SMTP:
        return LookupResult(
            None,
            "none",
            "Email cannot be looked up. Search the mailbox or the mail relay's log for "
            f"Message-ID <{operation.key}@onefold>, or ask the customer.",
        )
    if not lookup_can_answer(operation):
        return LookupResult(
            None,
            "none",
            f"{destination.name} offers no lookup for {operation.step}. Check it by hand for "
            f"external reference {operation.key}.",
        )
    context = step_context(operation)
    adapter = adapter_for(destination)
    try:
        if destination.lookup and step.find is not None:
            found = step.find(context, adapter)
            if found:
                return LookupResult(
                    True, "lookup", f"Found by external reference {operation.key}.", [found]
                )
            return LookupResult(
                False, "lookup", f"No effect holds external reference {operation.key}."
            )
        return _scan_listing(operation, adapter)  # an enquiry, in a CRM without lookup
    except DestinationError as exc:
        return LookupResult(None, "error", f"The destination did not answer usefully: {exc}")


def _scan_listing(operation: Operation, crm: CrmClient) -> LookupResult:
    started = operation.first_presented_at or operation.created_at
    since = (started - _LISTING_SLACK).isoformat()
    found: list[str] = []
    for pages, (page, _cursor) in enumerate(crm.iter_records(since=since, limit=2000), 1):
        found.extend(str(r["id"]) for r in page if r.get("external_ref") == operation.key)
        if pages >= _LISTING_MAX_PAGES:
            return LookupResult(
                bool(found) or None,
                "listing",
                f"Scanned {pages} pages of records since {since} and stopped; "
                "check the rest by hand.",
                found,
            )
    if found:
        return LookupResult(
            True,
            "listing",
            f"The CRM has no lookup; its record listing since {since} holds "
            f"{len(found)} record(s) with external reference {operation.key}.",
            found,
        )
    return LookupResult(
        False,
        "listing",
        f"The CRM has no lookup; its record listing since {since} holds no record with "
        f"external reference {operation.key}.",
    )


def _verify_reference(operation: Operation | None, destination_ref: str) -> str:
    """Checks a CRM record reference exists; other references are the reviewer's word."""
    if operation is None or operation.step != "create_enquiry":
        return "reviewer"
    adapter = adapter_for(operation.destination)
    if not isinstance(adapter, CrmClient):
        return "reviewer"
    try:
        record = adapter.get_record(destination_ref)
    except DestinationError as exc:
        raise CaseActionRefusedError(
            f"Could not check {destination_ref} in {operation.destination.name}: {exc}"
        ) from exc
    if record is None:
        raise CaseActionRefusedError(
            f"{operation.destination.name} has no record {destination_ref}; check the reference."
        )
    if record.get("merged_into"):
        raise CaseActionRefusedError(
            f"{destination_ref} was merged into {record['merged_into']}; use that reference."
        )
    if record.get("external_ref") not in (None, "", operation.key):
        return "exists_with_other_external_ref"
    return "exists"
