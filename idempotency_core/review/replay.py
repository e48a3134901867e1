"""Manual replay: a person asks for one more attempt of an operation under review.

It goes through the same claim, recovery rules and outcome recording as an
automatic retry, with the original operation key. It only reschedules: the
worker that picks it up runs `operation_execute` like any other task. So a
replay can never create an effect that an automatic retry would not.
"""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from idempotency_core.audit.cases import review_cases_settle
from idempotency_core.audit.entries import audit_record
from idempotency_core.execution.engine import operation_enqueue, operation_unhold_later
from idempotency_core.execution.policy import Recovery
from idempotency_core.models import Attempt, Operation, ReviewCase
from idempotency_core.review.cases import latest_lookup, lookup_can_answer

REPLAY_PERMISSION = "idempotency_core.replay_operation"


class ReplayRefusedError(Exception):
    """The operation cannot be replayed now; the message says why, for a person."""


def replay_requires_destination_check(operation: Operation) -> bool:
    """True when an earlier attempt may have applied the effect and nothing at the
    destination can recognise a repeat: a person must look first."""
    return operation.recovery == Recovery.REVIEW


def operation_replay(
    *,
    operation_id: int,
    actor: AbstractBaseUser,
    reason: str,
    destination_checked: bool = False,
) -> Operation:
    """Schedules one more attempt with the original key, or refuses with a reason."""
    if not actor.has_perm(REPLAY_PERMISSION):
        raise PermissionDenied("Replaying needs the replay permission (Replay admins).")
    reason = reason.strip()
    if not reason:
        raise ReplayRefusedError("A replay needs a reason.")
    now = timezone.now()
    with transaction.atomic():
        operation = (
            Operation.objects.select_for_update().select_related("event").get(pk=operation_id)
        )
        _refuse_unless_replayable(operation, destination_checked=destination_checked)
        recovery = operation.recovery
        if recovery == Recovery.REVIEW:
            # The reviewer looked the effect up and found it absent.
            recovery = Recovery.LOOKUP_FIRST if operation.destination.lookup else Recovery.NONE
        Operation.objects.filter(pk=operation.pk).update(
            status=Operation.Status.RETRY_SCHEDULED,
            next_attempt_at=now,
            next_trigger=Attempt.Trigger.REPLAY,
            next_triggered_by=actor,
            enqueued_at=now,
            recovery=recovery,
            updated_at=now,
        )
        # The steps after it wait again as usual; if the replay ends in review
        # again, its new case holds them again.
        unheld = operation_unhold_later(operation, now=now)
        cases = list(
            ReviewCase.objects.filter(operation=operation, status__in=ReviewCase.OPEN_STATUSES)
        )
        review_cases_settle(
            ReviewCase.objects.filter(pk__in=[c.pk for c in cases]),
            status=ReviewCase.Status.RESOLVED,
            code="replayed",
            note=reason,
            now=now,
        )
        audit_record(
            action="replay",
            actor=actor,
            operation=operation,
            case=cases[0] if cases else None,
            reason=reason,
            details={
                "operation_key": operation.key,
                "recovery": recovery,
                "destination_checked": destination_checked,
                "cases_resolved": [c.pk for c in cases],
                "unheld_operations": unheld,
            },
        )
        operation_enqueue(operation.pk)
    operation.refresh_from_db()
    return operation


def _refuse_unless_replayable(operation: Operation, *, destination_checked: bool) -> None:
    Status = Operation.Status
    if operation.status == Status.SUCCEEDED:
        raise ReplayRefusedError(
            f"{operation.step} already succeeded (destination reference "
            f"{operation.destination_ref or 'unknown'}); a replay would create a second effect."
        )
    if operation.status == Status.RUNNING:
        raise ReplayRefusedError(f"{operation.step} is running now; wait for its outcome.")
    if operation.status in (Status.PENDING, Status.RETRY_SCHEDULED):
        raise ReplayRefusedError(f"{operation.step} is already scheduled to run.")
    if operation.status == Status.CANCELLED:
        raise ReplayRefusedError(f"{operation.step} was cancelled.")
    unfinished = operation.event.operations.filter(position__lt=operation.position).exclude(
        status=Status.SUCCEEDED
    )
    if unfinished.exists():
        raise ReplayRefusedError(
            f"An earlier step ({unfinished.first().step}) has not succeeded; replay that first."
        )
    if replay_requires_destination_check(operation):
        _refuse_unless_checked_absent(operation, destination_checked=destination_checked)


def _refuse_unless_checked_absent(operation: Operation, *, destination_checked: bool) -> None:
    """The reviewer's word that the effect is absent, and, where the destination can be
    asked, a recorded lookup since the last attempt that found nothing."""
    unrecognisable = (
        f"{operation.step} may already have been applied and the destination can no longer "
        "recognise a repeat (no idempotency key within its window, no unique reference, no "
        "lookup)."
    )
    if lookup_can_answer(operation):
        lookup = latest_lookup(operation)
        last_attempt = operation.attempts.order_by("-number").first()
        if lookup is None or (last_attempt is not None and lookup.at < last_attempt.started_at):
            raise ReplayRefusedError(
                f"{unrecognisable} Look it up in the destination first (the case page's "
                "lookup), then confirm it is absent."
            )
        if lookup.details.get("found") is True:
            refs = ", ".join(lookup.details.get("refs", []))
            raise ReplayRefusedError(
                f"The lookup of {lookup.at:%Y-%m-%d %H:%M} UTC found the effect ({refs}): "
                "mark the case resolved with that reference; a replay would duplicate it."
            )
    if not destination_checked:
        raise ReplayRefusedError(
            f"{unrecognisable} Look it up in the destination first, then confirm it is absent."
        )
