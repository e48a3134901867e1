"""Review case services: what a reviewer decides about a case (docs/architecture.md)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from idempotency_core.audit.cases import review_case_locked, review_case_settle
from idempotency_core.audit.entries import case_audit
from idempotency_core.execution.outcomes import operation_release_next, operation_unhold_later
from idempotency_core.models import AuditEntry, Operation, ReviewCase
from idempotency_core.review.email_cases import is_email_case
from idempotency_core.review.lookup import reference_verify
from idempotency_core.review.merge import DUPLICATE_KINDS
from idempotency_core.review.refusals import CaseActionRefusedError, require_reason

logger = logging.getLogger(__name__)

# Closing a case ends it without the effect having been proven; the code says why.
RESOLUTION_CODES: dict[str, str] = {
    "handled_elsewhere": "Handled outside Onefold (by phone, in the CRM by hand)",
    "customer_withdrew": "The customer withdrew or no longer needs it",
    "spam_or_test": "Spam or test submission",
    "duplicate_submission": "The person submitted the same request twice",
    "not_fixable": "Cannot be fixed (wrong details, or the CRM or mail service is no longer used)",
    "other": "Other (explained in the reason)",
}


@dataclass(frozen=True)
class OwnershipResult:
    taken: list[int]
    skipped: list[int]


def open_case_locked(case_id: int) -> ReviewCase:
    """The case, locked, with its operation; refused unless it is open."""
    case = review_case_locked(case_id, "operation")
    if case.status not in ReviewCase.OPEN_STATUSES:
        raise CaseActionRefusedError(
            f"Case {case.pk} is already {case.get_status_display().lower()}; nothing to do."
        )
    return case


def open_case_of_kind(case_id: int, kind: str, refusal: str) -> tuple[ReviewCase, Operation]:
    """An open case of `kind`, locked, and the operation it decides; refused with
    `refusal` when the case is of another kind or has no operation."""
    case = open_case_locked(case_id)
    if case.kind != kind or case.operation is None:
        raise CaseActionRefusedError(refusal)
    return case, case.operation


def case_take_ownership(
    *,
    case_ids: Sequence[int],
    actor: User,
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
            case_audit(
                case,
                action="case_taken",
                actor=actor,
                reason=reason.strip(),
                details={"previous_owner": previous},
            )
            taken.append(case.pk)
    return OwnershipResult(taken=taken, skipped=skipped)


def case_mark_resolved(
    *, case_id: int, actor: User, destination_ref: str, reason: str, from_lookup: int | None = None
) -> ReviewCase:
    """Resolves a case with the destination reference the reviewer verified (`from_lookup`:
    the audit entry of the lookup that found it). A held operation becomes succeeded with
    it and releases the next step; a CRM reference is checked against the CRM first, so
    a typo cannot mark an absent effect done.
    """
    reason = require_reason(reason)
    destination_ref = destination_ref.strip()
    if not destination_ref:
        raise CaseActionRefusedError("Give the reference you verified in the destination.")
    case = ReviewCase.objects.select_related("operation__destination").get(pk=case_id)
    _refuse_unless_resolvable_by_reference(case)
    verification = reference_verify(case.operation, destination_ref)  # network: before the lock
    now = timezone.now()
    with transaction.atomic():
        case = open_case_locked(case_id)
        operation = case.operation
        completed, unheld, released = (
            operation_complete(operation, destination_ref=destination_ref, now=now)
            if operation is not None
            else (False, [], [])
        )
        review_case_settle(
            case,
            code="verified_in_destination",
            note=f"{destination_ref}: {reason}",
            action="case_resolved",
            actor=actor,
            reason=reason,
            now=now,
            details={
                "destination_ref": destination_ref,
                "verification": verification,
                "operation_completed": completed,
                "unheld_operations": unheld,
                "released_operations": released,
                "from_lookup": from_lookup,
            },
        )
    case.refresh_from_db()
    return case


def _refuse_unless_resolvable_by_reference(case: ReviewCase) -> None:
    """Cases a verified reference cannot settle, refused before any network call."""
    if case.status not in ReviewCase.OPEN_STATUSES:
        raise CaseActionRefusedError(f"Case {case.pk} is no longer open.")
    if is_email_case(case):
        # SMTP gives nothing to verify: a typed "reference" would be stored as proof.
        raise CaseActionRefusedError(
            "An email has no reference to verify. Ask the customer, then choose "
            "'customer confirms receipt' or 'not received: send again'."
        )
    if case.kind == ReviewCase.Kind.DUPLICATE_HELD:
        # Never written: a reference would mark it done and send its task and email.
        raise CaseActionRefusedError(
            "This submission was held before the CRM and never written: choose "
            "'Same enquiry' or 'Separate enquiry'."
        )


def operation_complete(
    operation: Operation, *, destination_ref: str, now: datetime
) -> tuple[bool, list[int], list[int]]:
    """The reviewer's verified reference is the operation's success: (completed,
    unheld step ids, released step ids). Conditional: a replay or a worker may
    have moved the operation on since the page was rendered; then the reference
    is only evidence."""
    completed = Operation.objects.filter(
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
    if not completed:
        return False, [], []
    # The steps it held go back in line and the pipeline carries on.
    unheld = operation_unhold_later(operation, now=now)
    return True, unheld, operation_release_next(operation, now=now)


def case_close(*, case_id: int, actor: User, resolution_code: str, reason: str) -> ReviewCase:
    """Closes a case without the effect: the reviewer decided it will not happen. A held
    operation and its event's later steps not yet run are cancelled; nothing is undone.
    """
    reason = require_reason(reason)
    if resolution_code not in RESOLUTION_CODES:
        raise CaseActionRefusedError(f"Unknown resolution code {resolution_code!r}.")
    now = timezone.now()
    with transaction.atomic():
        case = open_case_locked(case_id)
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
        review_case_settle(
            case,
            status=ReviewCase.Status.CLOSED,
            code=resolution_code,
            action="case_closed",
            actor=actor,
            reason=reason,
            now=now,
            details={"resolution_code": resolution_code, "cancelled_operations": cancelled},
        )
    case.refresh_from_db()
    return case


def case_mark_not_duplicate(*, case_id: int, actor: User, reason: str) -> ReviewCase:
    """Resolves a suspected duplicate as two genuine, separate records: nothing merges."""
    reason = require_reason(reason)
    now = timezone.now()
    with transaction.atomic():
        case = open_case_locked(case_id)
        if case.kind not in DUPLICATE_KINDS:
            raise CaseActionRefusedError("Only a suspected duplicate can be 'not a duplicate'.")
        review_case_settle(
            case,
            code="not_duplicate",
            action="not_duplicate",
            actor=actor,
            reason=reason,
            now=now,
            details={"evidence": case.evidence},
        )
    case.refresh_from_db()
    return case


# -- the next case, reopening -------------------------------------------------------

# How many of the oldest candidates one call tries before reading the queue again: a
# reviewer who loses a race to another (the conditional UPDATE matched no row) takes
# the next one without a second query.
_NEXT_BATCH = 20


def case_take_next(*, actor: User, candidates: QuerySet[ReviewCase]) -> ReviewCase | None:
    """Takes the oldest open case nobody owns among `candidates` for `actor`, or None.

    A conditional UPDATE (`WHERE owner IS NULL`) lets one of two racing reviewers win;
    the loser moves on to the next case. Audited as `case_taken`.
    """
    Status = ReviewCase.Status
    waiting = candidates.filter(status=Status.OPEN, owner__isnull=True)
    if not waiting.ordered:  # the caller's order (its routed cases first), else the oldest
        waiting = waiting.order_by("created_at", "id")
    for _round in range(5):
        ids = list(waiting.values_list("pk", flat=True)[:_NEXT_BATCH])
        for pk in ids:
            with transaction.atomic():
                now = timezone.now()
                taken = ReviewCase.objects.filter(
                    pk=pk, status=Status.OPEN, owner__isnull=True
                ).update(owner=actor, status=Status.IN_PROGRESS, updated_at=now)
                if not taken:
                    continue  # another reviewer took it first
                case = ReviewCase.objects.select_related("event", "operation").get(pk=pk)
                case_audit(
                    case,
                    action="case_taken",
                    actor=actor,
                    details={"previous_owner": "", "next_case": True},
                )
                return case
        if len(ids) < _NEXT_BATCH:
            return None
    return None


# Settlements a reopen cannot take back: what they did outside Onefold stays done, and
# an erased person's data is gone for good.
_IRREVERSIBLE: dict[str, str] = {
    "merged": "a merge in the CRM cannot be undone; the two records are one now.",
    "sent_again": "the email was sent again, and an email cannot be taken back.",
    "separate_enquiry": (
        "the held submission was written to the CRM as an enquiry of its own; if it was "
        "the same request after all, it is now a duplicate to merge."
    ),
    # privacy/erasure.py's closing code (review sits below privacy: no import).
    "person_erased": (
        "the person's data was erased on request; there is nothing left to send or decide."
    ),
}


@dataclass(frozen=True)
class ReopenCheck:
    possible: bool
    refusal: str = ""


def case_reopen_check(case: ReviewCase) -> ReopenCheck:
    """Whether a settled case may be reopened, and if not, why (in words)."""
    if case.status in ReviewCase.OPEN_STATUSES:
        return ReopenCheck(False)
    refusal = _IRREVERSIBLE.get(case.resolution_code)
    if refusal is None and case.kind in DUPLICATE_KINDS:
        merges = Operation.objects.filter(arguments__case_id=case.pk).exclude(
            status=Operation.Status.CANCELLED
        )
        if merges.exists():
            refusal = _IRREVERSIBLE["merged"]
    return ReopenCheck(refusal is None, (refusal or "")[:1].upper() + (refusal or "")[1:])


def case_reopen(*, case_id: int, actor: User, reason: str) -> ReviewCase:
    """Reopens a resolved or closed case: it is `actor`'s again, in progress, and what
    its settlement cancelled (the steps a close or a "same enquiry" cancelled, still
    cancelled) waits for a person again, held behind the case's step as before. Refused
    where the settlement changed something outside Onefold for good (a CRM merge, an
    email sent again, a submission written) or the person's data was erased, and where
    another open case of the same kind is about the same thing (one open case per
    subject and kind)."""
    reason = require_reason(reason)
    now = timezone.now()
    with transaction.atomic():
        case = review_case_locked(case_id, "operation")
        check = case_reopen_check(case)
        if not check.possible:
            raise CaseActionRefusedError(
                check.refusal or f"Case {case.pk} is open already: nothing to reopen."
            )
        other = (
            ReviewCase.objects.filter(
                subject=case.subject, kind=case.kind, status__in=ReviewCase.OPEN_STATUSES
            )
            .exclude(pk=case.pk)
            .values_list("pk", flat=True)
            .first()
        )
        if other is not None:
            raise CaseActionRefusedError(
                f"Case {other} is open about the same thing: continue there instead."
            )
        restored = _restore_cancelled(case, now=now)
        previous = {
            "previous_status": case.status,
            "previous_resolution": case.resolution_code,
        }
        ReviewCase.objects.filter(pk=case.pk).update(
            status=ReviewCase.Status.IN_PROGRESS,
            owner=actor,
            resolution_code="",
            resolution_note="",
            resolved_at=None,
            updated_at=now,
        )
        case_audit(
            case,
            action="case_reopened",
            actor=actor,
            reason=reason,
            details={**previous, "restored_operations": restored},
        )
    case.refresh_from_db()
    return case


def _restore_cancelled(case: ReviewCase, *, now: datetime) -> list[int]:
    """The steps the case's settlement cancelled (as its audit entry names them), back
    in review: the case's own step unheld, the later ones held behind it. Only those
    still cancelled and never tried since: nothing that ran is touched."""
    settlement = (
        AuditEntry.objects.filter(case=case, action__in=("case_closed", "duplicate_linked"))
        .order_by("-at", "-pk")
        .values_list("details", flat=True)
        .first()
    )
    ids = [int(i) for i in (settlement or {}).get("cancelled_operations") or []]
    if not ids:
        return []
    cancelled = Operation.objects.select_for_update().filter(
        pk__in=ids, status=Operation.Status.CANCELLED
    )
    restored = list(cancelled.order_by("position").values_list("pk", flat=True))
    own = case.operation_id
    changes = {"status": Operation.Status.NEEDS_REVIEW, "completed_at": None, "updated_at": now}
    Operation.objects.filter(pk__in=[pk for pk in restored if pk == own]).update(
        held_by=None, **changes
    )
    Operation.objects.filter(pk__in=[pk for pk in restored if pk != own]).update(
        held_by_id=own, **changes
    )
    return restored


# -- several cases at once ------------------------------------------------------------

# At most this many cases in one request: each is its own transaction and audit entry.
MANY_LIMIT = 500


@dataclass(frozen=True)
class ManyResult:
    settled: list[int]
    refused: list[tuple[int, str]]


def cases_settle_many(
    *,
    case_ids: Sequence[int],
    actor: User,
    decision: str,
    reason: str,
    resolution_code: str = "",
) -> ManyResult:
    """Settles each case in turn by the one-case service (`case_close`, or
    `case_mark_not_duplicate` for "not_duplicate"), so each meets the same guards and
    gets its own audit entry; a refused case is reported and the others go on."""
    reason = require_reason(reason)
    if decision not in ("close", "not_duplicate"):
        raise CaseActionRefusedError(f"Unknown decision {decision!r}.")
    if len(case_ids) > MANY_LIMIT:
        raise CaseActionRefusedError(f"Choose at most {MANY_LIMIT} cases at a time.")
    settled: list[int] = []
    refused: list[tuple[int, str]] = []
    for case_id in dict.fromkeys(case_ids):
        try:
            if decision == "close":
                case_close(
                    case_id=case_id, actor=actor, resolution_code=resolution_code, reason=reason
                )
            else:
                case_mark_not_duplicate(case_id=case_id, actor=actor, reason=reason)
        except ReviewCase.DoesNotExist:
            refused.append((case_id, "no such case"))
        except CaseActionRefusedError as exc:
            refused.append((case_id, str(exc)))
        else:
            settled.append(case_id)
    return ManyResult(settled=settled, refused=refused)
