"""Calling the destination for a claimed operation, and classifying its answer."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from idempotency_core.execution.budget import (
    BudgetGate,
    BudgetSettingError,
    BudgetWaitError,
    budget_for,
    destination_pause,
)
from idempotency_core.execution.claims import Claim
from idempotency_core.execution.confirmations import Allowance
from idempotency_core.execution.content import content_ensure
from idempotency_core.execution.destinations import (
    AdapterUnavailableError,
    DestinationRefusedError,
    adapter_for,
    destination_ready,
)
from idempotency_core.execution.policy import AttemptReport, OperationState, Recovery, recovery_for
from idempotency_core.execution.steps import (
    Step,
    StepContext,
    capabilities_for,
    step_context,
    step_of,
)
from idempotency_core.models import Attempt, Destination, DestinationBudget, Operation
from integrations.base import Adapter, DestinationError, RateLimit, Reply
from integrations.http import request_gate

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttemptResult(AttemptReport):
    """What the call did: the report `policy.decide()` reads, and what the attempt
    records besides."""

    error_class: str = ""
    reply: Reply | None = None
    destination_ref: str = ""
    adopted: bool = False


def operation_state(operation: Operation, *, attempt_number: int | None = None) -> OperationState:
    """The operation as `policy.decide()` sees it."""
    step = step_of(operation)
    return OperationState(
        step=operation.step,
        attempt_number=operation.attempt_count if attempt_number is None else attempt_number,
        first_presented_at=operation.first_presented_at,
        current_recovery=operation.recovery,
        at_most_once=step.at_most_once,
        idempotent_action=step.idempotent_action,
        waits=operation.waits,
    )


def _effective_recovery(operation: Operation) -> str:
    """Re-checks, at call time, the rule chosen after an unclear attempt.

    A retry meant to reuse the idempotency key may run later than planned; if the
    destination's window has passed by now, the rule falls back on what else it offers.
    """
    if not operation.recovery:
        return Recovery.NONE
    return recovery_for(
        state=operation_state(operation),
        capabilities=capabilities_for(operation),
        retry_at=timezone.now() + timedelta(seconds=settings.ONEFOLD_HTTP_TIMEOUT_SECONDS),
    )


# The rules under which a repeat is safe only because the destination recognises it:
# before one is followed, that capability is read again (`_reliance_check`).
_RELIES_ON_CAPABILITY = frozenset(
    {Recovery.REPEAT_WITH_KEY, Recovery.REPEAT_UNIQUE_REF, Recovery.LOOKUP_FIRST}
)


def operation_perform(claim: Claim) -> AttemptResult:
    """Calls the destination for a claimed operation and classifies the answer.

    The claim must be committed first (`operation_claim`); the result is written
    by `operation_record_outcome`. Split so the drill can stop a worker between
    the call and the outcome, as a crash would.
    """
    operation = claim.operation
    rule = _effective_recovery(operation)
    if rule == Recovery.REVIEW:
        return AttemptResult(
            outcome=Attempt.Outcome.AMBIGUOUS,
            error_class="RecognitionUnavailable",
            message="an earlier attempt may have been applied and the destination can no "
            "longer recognise a repeat; not called",
        )
    try:
        adapter = adapter_for(operation.destination)
        with _within_budget(operation.destination, adapter):
            # Never a call to a destination whose declared capabilities do not hold.
            destination_ready(operation.destination)
            if rule in _RELIES_ON_CAPABILITY:
                lost = _reliance_check(operation)
                if lost:
                    return AttemptResult(
                        outcome=Attempt.Outcome.AMBIGUOUS,
                        error_class="CapabilityLost",
                        message=f"not called: {lost}",
                        capability_lost=lost,
                    )
            return _call_destination(
                operation, rule=rule, refs=claim.refs, adapter=adapter, allowance=claim.allowance
            )
    except DestinationRefusedError as exc:
        if exc.unreachable:  # no verdict at all: an ordinary retry
            return AttemptResult(
                outcome=str(exc.classification), message=exc.message, error_class=type(exc).__name__
            )
        # Its declaration does not hold: the destination's work waits, one pause for all
        # of it, and resumes when it verifies again (no case per submission).
        return _waited(operation, exc, pause=DestinationBudget.Pause.REFUSED)
    except DestinationError as exc:
        return _refusal_result(operation, exc)
    except Exception as exc:
        # A bug of ours after the call may have started: treat as may-have-happened.
        # Logged by ids and class: the exception's text may quote the payload or a
        # destination's answer. The attempt keeps the text, behind the console's login.
        logger.error(
            "operation %s (event %s): unexpected %s\n%s",
            operation.pk,
            operation.event_id,
            type(exc).__name__,
            "".join(traceback.format_tb(exc.__traceback__)).rstrip(),
        )
        return AttemptResult(
            outcome=Attempt.Outcome.AMBIGUOUS,
            message=f"unexpected error: {exc}",
            error_class=type(exc).__name__,
        )


def _refusal_result(operation: Operation, exc: DestinationError) -> AttemptResult:
    """What a destination's refusal (or Onefold's own hold) makes of the attempt."""
    if getattr(exc, "skipped", False):
        return AttemptResult(outcome=Attempt.Outcome.SKIPPED, message=exc.message)
    if exc.rate_limit:
        return _waited(operation, exc, pause=_PAUSE_OF[exc.rate_limit])
    return AttemptResult(
        outcome=str(exc.classification),
        message=exc.message,
        error_class=type(exc.__cause__ or exc).__name__,
        reply=exc.reply,
        retry_after=exc.retry_after,
        matches=tuple(getattr(exc, "matches", ())),
        create_anyway=getattr(exc, "create_anyway", False),
        held=getattr(exc, "held", False),
    )


# What each kind of wait pauses: the whole destination, or (None) this operation alone.
_PAUSE_OF: dict[str, str | None] = {
    RateLimit.WINDOW: DestinationBudget.Pause.WINDOW,
    RateLimit.DAILY: DestinationBudget.Pause.DAILY,
    RateLimit.IN_PROGRESS: None,
}


def _waited(operation: Operation, exc: DestinationError, *, pause: str | None) -> AttemptResult:
    """A rate limit, a spent day, a refused destination, or the same request still in
    progress: nothing was applied. Unless the wait was Onefold's own budget or concerns
    this request alone, the destination is paused for every worker."""
    seconds = exc.retry_after
    if pause == DestinationBudget.Pause.REFUSED:
        seconds = settings.ONEFOLD_VERIFY_RETRY_SECONDS
    elif seconds is None:
        seconds = settings.ONEFOLD_RETRY_BASE_SECONDS
    if pause is not None and not isinstance(exc, BudgetWaitError):
        until = destination_pause(
            operation.destination, seconds=seconds, kind=pause, reason=exc.message
        )
        seconds = max(seconds, (until - timezone.now()).total_seconds())
    return AttemptResult(
        outcome=Attempt.Outcome.WAITED,
        message=exc.message,
        error_class=type(exc).__name__,
        reply=exc.reply,
        retry_after=seconds,
    )


def _reliance_check(operation: Operation) -> str:
    """Recovery is about to rely on what the destination recognises of a repeat: that is
    read again now, whatever the last verification said ("" when it holds). A stale
    verdict could repeat a create the destination no longer refuses. A destination that
    cannot be asked (or asks to wait) raises: nothing is called, and no verdict given."""
    try:
        destination_ready(operation.destination, fresh=True)
    except DestinationRefusedError as exc:
        if exc.unreachable:
            raise
        destination_pause(
            operation.destination,
            seconds=settings.ONEFOLD_VERIFY_RETRY_SECONDS,
            kind=DestinationBudget.Pause.REFUSED,
            reason=exc.message,
        )
        return exc.message
    return ""


@contextmanager
def _within_budget(destination: Destination, adapter: Adapter) -> Iterator[None]:
    """Every request of this attempt, its verifications included, within the
    destination's shared budget (budget.py)."""
    try:
        budget = budget_for(destination, adapter.request_budget)
    except BudgetSettingError as exc:
        raise AdapterUnavailableError(str(exc)) from exc
    gate = request_gate.set(BudgetGate(destination, budget))
    try:
        yield
    finally:
        request_gate.reset(gate)


def _call_destination(
    operation: Operation,
    *,
    rule: str,
    refs: dict[str, str] | None,
    adapter: Adapter,
    allowance: Allowance | None = None,
) -> AttemptResult:
    """Reads first where the rule allows it, else performs the step's effect."""
    context = step_context(operation, refs=refs, adapter=adapter, allowance=allowance)
    # Rendered once, stored (committed) before any call: every attempt sends the same.
    content_ensure(context)
    return _read_or_perform(operation, step_of(operation), context, rule=rule)


def _read_or_perform(
    operation: Operation, step: Step, context: StepContext, *, rule: str
) -> AttemptResult:
    """After an unclear attempt, the effect is read by its reference before anything is
    created again, wherever the destination can read by it: what a unique reference
    would refuse is found without relying on how the refusal is worded (a 409, a 400)."""
    find = step.find if rule in (Recovery.LOOKUP_FIRST, Recovery.REPEAT_UNIQUE_REF) else None
    # Read only after an unclear attempt: the sandbox's capabilities are a network read.
    capabilities = capabilities_for(operation) if find is not None else None
    if (
        find is not None
        and capabilities is not None
        and (rule == Recovery.LOOKUP_FIRST or capabilities.lookup)
    ):
        found = find(context)
        if found:
            return AttemptResult(
                outcome=Attempt.Outcome.SUCCEEDED, destination_ref=found, adopted=True
            )
        if rule == Recovery.LOOKUP_FIRST and not capabilities.lookup_proves_absence:
            return AttemptResult(
                outcome=Attempt.Outcome.AMBIGUOUS,
                error_class="AbsenceUnproven",
                message="the lookup by reference found nothing, and this destination's "
                "lookup lags its writes: not proof of absence; not repeated",
                absence_unproven=True,
            )
    effect = step.perform(context)
    return AttemptResult(
        outcome=Attempt.Outcome.SUCCEEDED,
        destination_ref=effect.ref,
        reply=effect.reply,
        adopted=effect.adopted,
    )
