"""The engine: claim an operation, call its destination, record the outcome.

The claim is committed before any network call, the outcome is written only under
the claim token, and the next step is released with this one's success. Every caller
goes through `operation_execute` (or `operation_execute_chain`), so none bypasses them.
"""

from __future__ import annotations

import json
import logging
import os
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache, partial
from typing import Any, Literal

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.tasks import async_task

from idempotency_core.audit.cases import (
    review_case_open,
    review_case_requeue,
    review_cases_settle_on_success,
    review_cases_supersede,
)
from idempotency_core.audit.entries import audit_record
from idempotency_core.audit.subjects import operation_subject
from idempotency_core.execution.budget import (
    BudgetGate,
    BudgetSettingError,
    BudgetWaitError,
    budget_for,
    destination_pause,
)
from idempotency_core.execution.confirmations import Allowance, AllowanceAsk
from idempotency_core.execution.content import content_ensure, next_content_render
from idempotency_core.execution.destinations import (
    AdapterUnavailableError,
    DestinationRefusedError,
    adapter_for,
    destination_ready,
)
from idempotency_core.execution.policy import (
    AttemptReport,
    Decision,
    OperationState,
    Recovery,
    RetryPolicy,
    decide,
    recovery_for,
)
from idempotency_core.execution.statements import (
    SCREENED,
    Decided,
    Taken,
    Written,
    claim_take,
    outcome_write,
    release_write,
)
from idempotency_core.execution.steps import (
    Step,
    StepContext,
    capabilities_for,
    confirmation_recipient,
    step_context,
    step_of,
)
from idempotency_core.models import Attempt, Destination, DestinationBudget, Operation
from idempotency_core.platform.logfilters import log_ids_bound
from integrations.base import Adapter, DestinationError, RateLimit, Reply
from integrations.http import request_gate

logger = logging.getLogger(__name__)

TASK = "idempotency_core.tasks.operation_run"

# The queue (django-q2 cluster name) tasks go to; the drill sends its own to a
# queue no worker cluster listens on, so it alone decides when its steps run.
_queue: ContextVar[str | None] = ContextVar("onefold_queue", default=None)


# Set by operation_execute_chain while it records an outcome: the step that
# success releases is claimed for this worker (appended here) instead of queued.
_chained: ContextVar[list[Claim] | None] = ContextVar("onefold_chained", default=None)
_CHAIN_MARGIN_SECONDS = 0.5


@contextmanager
def tasks_queued_to(name: str) -> Iterator[None]:
    token = _queue.set(name)
    try:
        yield
    finally:
        _queue.reset(token)


def operation_enqueue(operation_id: int) -> None:
    """Puts a task on the queue. The message carries the id and nothing else.

    With the ORM broker on the business database this insert joins the caller's
    transaction: the task exists exactly when the row that needs it does.
    """
    queue = _queue.get()
    options = {"cluster": queue} if queue else {}
    broker = _broker(queue or Conf.CLUSTER_NAME, os.getpid())
    async_task(TASK, operation_id, task_name=f"operation-{operation_id}", broker=broker, **options)


@lru_cache(maxsize=16)
def _broker(queue: str, pid: int) -> Any:
    """The process's broker for `queue`, made once: `async_task` would make one for every
    task. By process: a forked child makes its own."""
    return get_broker(queue)


@dataclass(frozen=True)
class Claim:
    operation: Operation
    attempt: Attempt
    token: uuid.UUID
    # The earlier succeeded steps' references, when the claim read them (statements.py).
    refs: dict[str, str] | None = None
    # A confirmation's decision, made by the statement that claimed it (a chain's).
    allowance: Allowance | None = None


@dataclass(frozen=True)
class AttemptResult:
    outcome: str
    message: str = ""
    error_class: str = ""
    reply: Reply | None = None
    destination_ref: str = ""
    adopted: bool = False
    retry_after: float | None = None
    # A lookup found nothing, and the destination's lookup cannot prove absence.
    absence_unproven: bool = False
    # A duplicate rule's refusal: the records matched, and whether a create may insist.
    matches: tuple[str, ...] = ()
    create_anyway: bool = False
    # Onefold held the step before calling anyone (a confirmation over its limits).
    held: bool = False
    # A capability recovery relies on no longer holds (policy.AttemptReport).
    capability_lost: str = ""


@dataclass(frozen=True)
class Screen:
    """A check run before the claim when `sql` (a boolean over `params()` and the
    operation's id) is true; the claim's statement evaluates it, so the usual case
    costs no round trip. Used by the suspected-duplicate search."""

    sql: str
    params: Callable[[], list[object]]
    check: Callable[[int], object]


def operation_claim(*, operation_id: int, screen: Screen | None = None) -> Claim | None:
    """Takes the operation if it is due and nobody holds it; None otherwise.

    Committed before the destination is called, so a second worker (or a
    redelivered task) finds it running and leaves it alone. The attempt records
    who or what scheduled it (worker, sweeper, a replaying admin).
    """
    # One statement, in its own transaction (autocommit): committed when it returns.
    claim = _claim_take(operation_id, now=timezone.now(), screen=screen)
    if claim == SCREENED and screen is not None:
        screen.check(operation_id)
        claim = _claim_take(operation_id, now=timezone.now())
    return claim if isinstance(claim, Claim) else None


def _claim_take(
    operation_id: int, *, now: datetime, screen: Screen | None = None
) -> Claim | Literal["screened"] | None:
    """The claim's conditional UPDATE of the operation, if due and unowned, and its
    attempt. Committed before the destination is called. One statement
    (statements.claim_take), which evaluates `screen` too (SCREENED when it holds)."""
    token = uuid.uuid4()
    taken = claim_take(
        operation_id,
        token=token,
        now=now,
        lease_until=_lease_until(now),
        unless=None if screen is None else (screen.sql, screen.params()),
    )
    if taken is None or taken == SCREENED:
        return taken
    return _claim_of(taken, token=token, now=now)


def _lease_until(now: datetime) -> datetime:
    return now + timedelta(seconds=settings.ONEFOLD_LEASE_SECONDS)


def _claim_of(
    taken: Taken, *, token: uuid.UUID, now: datetime, allowance: Allowance | None = None
) -> Claim:
    """The claim a statement took (statements.py), its attempt already inserted."""
    operation, attempt_id, refs = taken
    attempt = _attempt_of(operation, token=token, now=now)
    attempt.pk = attempt_id
    attempt._state.adding = False
    return Claim(operation=operation, attempt=attempt, token=token, refs=refs, allowance=allowance)


def _attempt_of(operation: Operation, *, token: uuid.UUID, now: datetime) -> Attempt:
    """The claim's attempt: who or what scheduled it, and the rule it follows."""
    return Attempt(
        operation=operation,
        number=operation.attempt_count,
        claim_token=token,
        trigger=operation.next_trigger,
        triggered_by_id=operation.next_triggered_by_id,
        recovery=operation.recovery,
        started_at=now,
    )


def operation_execute(*, operation_id: int) -> str | None:
    """Runs one attempt if the operation can be claimed. Safe to call twice at once."""
    claim = operation_claim(operation_id=operation_id)
    if claim is None:
        return None
    result = operation_perform(claim)
    operation_record_outcome(claim=claim, result=result)
    return result.outcome


def operation_execute_chain(
    *, operation_id: int, seconds: float, screen: Screen | None = None
) -> str | None:
    """`operation_execute`, then each step its success releases, in this task.

    The next step is claimed with this one's success instead of queued, while the
    `seconds` left cover a lookup and a call; a worker that dies between leaves a
    lease the sweeper recovers. Returns the outcome of `operation_id`'s attempt.
    """
    deadline = time.monotonic() + seconds
    first = operation_claim(operation_id=operation_id, screen=screen)
    claims = [first] if first is not None else []
    outcome = None
    while claims:
        claim = claims.pop(0)
        # The task's log lines named the first operation; each step names its own.
        with log_ids_bound(operation_id=claim.operation.pk):
            result = operation_perform(claim)
            outcome = outcome or result.outcome
            time_left = deadline - time.monotonic()
            chained: list[Claim] | None = [] if time_left > _chain_allowance() else None
            token = _chained.set(chained)
            try:
                operation_record_outcome(claim=claim, result=result)
            finally:
                _chained.reset(token)
        claims.extend(chained or ())
    return outcome


def _chain_allowance() -> float:
    """The time a chained step may need: a lookup and a call, each bounded by the
    HTTP timeout, and a margin for the two transactions around them."""
    return 2 * settings.ONEFOLD_HTTP_TIMEOUT_SECONDS + _CHAIN_MARGIN_SECONDS


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


def operation_record_outcome(
    *,
    claim: Claim,
    result: AttemptResult,
    system: str = Attempt.Trigger.WORKER,
    learned: bool = True,
) -> bool:
    """Writes the outcome if this claim still owns the operation. Returns whether it did.

    With it, in one transaction: a success releases the next step; a decision for
    review opens the case and holds the steps behind it. `learned=False` (the
    sweeper's "interrupted"): if the claim was lost meanwhile, nothing is kept.
    """
    operation = claim.operation
    now = timezone.now()
    decision = decide(
        state=operation_state(operation, attempt_number=claim.attempt.number),
        report=AttemptReport(
            outcome=result.outcome,
            message=result.message,
            retry_after=result.retry_after,
            absence_unproven=result.absence_unproven,
            matches=result.matches,
            create_anyway=result.create_anyway,
            held=result.held,
            capability_lost=result.capability_lost,
        ),
        capabilities=partial(capabilities_for, operation),
        now=now,
        policy=RetryPolicy.from_settings(),
    )
    released = _success_release(claim, result, decision, system=system, now=now)
    if released is not None:
        if not released:  # the claim was lost meanwhile
            if learned:
                _late_outcome_keep(claim, result, system=system)
            return False
        return True
    with transaction.atomic():
        owned, cases_waiting = _outcome_write(claim, result, decision, system=system, now=now)
        if not owned:
            if learned:
                _late_outcome_keep(claim, result, system=system)
            return False
        if decision.status == Operation.Status.SUCCEEDED:
            _success_follow(operation, result, now=now, cases_waiting=cases_waiting)
        elif decision.status == Operation.Status.CANCELLED:
            # Skipped by Onefold's rule (nothing to do): the steps after it go on.
            operation_release_next(operation, now=now)
        elif decision.case_kind:
            _review_open(claim, result, decision, system=system, now=now)
    _outcome_log(claim, result, decision)
    return True


def _outcome_log(claim: Claim, result: AttemptResult, decision: Decision) -> None:
    """One line for each attempt that did not succeed, by ids, classes and codes only:
    the attempt's message may quote the payload or the destination's answer."""
    if decision.status == Operation.Status.SUCCEEDED:
        return
    logger.log(
        logging.WARNING if decision.case_kind else logging.INFO,
        "operation %s (event %s) attempt %s: %s%s, now %s%s",
        claim.operation.pk,
        claim.operation.event_id,
        claim.attempt.number,
        result.outcome,
        f" ({result.reply})" if result.reply else "",
        decision.status,
        f", case {decision.case_kind}" if decision.case_kind else "",
    )


def _success_release(
    claim: Claim, result: AttemptResult, decision: Decision, *, system: str, now: datetime
) -> bool | None:
    """A success whose only follow-up is the next step, in one statement that also
    releases it: claimed for this worker in a chain, else made due and queued (a task
    lost in between is the sweeper's: docs/task-queue.md, rule 2). None when this path
    does not apply; else whether the claim still owned the operation."""
    if not (
        decision.status == Operation.Status.SUCCEEDED
        and step_of(claim.operation).on_success is None
    ):
        return None
    chained = _chained.get()
    token = uuid.uuid4()
    ahead = None if chained is None else _ahead_of(claim, result, now=now)
    written = _outcome_statement(
        claim,
        result,
        decision,
        system=system,
        now=now,
        release_next=True,
        claim_next=None if chained is None else (token, _lease_until(now)),
        next_content=None if ahead is None else ahead.content_json(),
        allowance=None if ahead is None else ahead.allowance(),
    )
    if written.cases_waiting:
        return None
    if not written.owned:
        return False
    if chained is not None:
        ask = None if ahead is None else ahead.ask
        chained.extend(
            _claim_of(taken, token=token, now=now, allowance=_allowance_of(ask, decided))
            for taken, decided in zip(written.taken, written.decided, strict=True)
        )
    else:
        for operation_id in written.released:
            operation_enqueue(operation_id)
    return True


@dataclass(frozen=True)
class _Ahead:
    """What a chain's success statement does for the step it claims: stores its
    content, rendered now (content.py), and, for a confirmation, asks the sending
    limits' decision (confirmations.py), committed with the claim."""

    step: str
    content: dict[str, Any]
    ask: AllowanceAsk | None

    def content_json(self) -> str:
        return json.dumps({self.step: self.content})

    def allowance(self) -> tuple[str, list[object]] | None:
        return None if self.ask is None else (self.step, self.ask.params())


def _ahead_of(claim: Claim, result: AttemptResult, *, now: datetime) -> _Ahead | None:
    """The next step's `_Ahead`, or None when nothing is rendered ahead."""
    rendered = next_content_render(
        claim.operation, refs=claim.refs, destination_ref=result.destination_ref, now=now
    )
    if rendered is None:
        return None
    step, content = rendered
    recipient = confirmation_recipient(step, content)
    return _Ahead(step, content, None if recipient is None else AllowanceAsk.of(recipient, now=now))


def _allowance_of(ask: AllowanceAsk | None, decided: Decided | None) -> Allowance | None:
    """The decision a statement made for `ask`, if it made one."""
    return None if ask is None or decided is None else Allowance(ask, *decided)


def _outcome_statement(
    claim: Claim,
    result: AttemptResult,
    decision: Decision,
    *,
    system: str,
    now: datetime,
    release_next: bool,
    claim_next: tuple[uuid.UUID, datetime] | None = None,
    next_content: str | None = None,
    allowance: tuple[str, list[object]] | None = None,
) -> Written:
    """statements.outcome_write for this claim."""
    operation_sets, attempt_sets = _outcome_fields(
        claim.operation, result, decision, system=system, now=now
    )
    return outcome_write(
        claim.operation.pk,
        token=claim.token,
        sets=operation_sets,
        attempt_id=claim.attempt.pk,
        attempt_sets=attempt_sets,
        settles_case_ids=list((claim.operation.arguments or {}).get("settles_case_ids", [])),
        release_next=release_next,
        claim_next=claim_next,
        next_content=next_content,
        allowance=allowance,
        event=claim.operation.event,
        now=now,
    )


def _outcome_write(
    claim: Claim, result: AttemptResult, decision: Decision, *, system: str, now: datetime
) -> tuple[bool, bool]:
    """The conditional UPDATE of invariant 4, and the attempt's own outcome. Returns
    whether the claim still owned the operation, and whether an open case waits on its
    success."""
    written = _outcome_statement(
        claim, result, decision, system=system, now=now, release_next=False
    )
    return written.owned, written.cases_waiting


def _outcome_fields(
    operation: Operation, result: AttemptResult, decision: Decision, *, system: str, now: datetime
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The operation's and the attempt's fields that record the outcome."""
    succeeded = decision.status == Operation.Status.SUCCEEDED
    operation_sets: dict[str, Any] = {
        "status": decision.status,
        "claim_token": None,
        "lease_expires_at": None,
        "next_attempt_at": decision.next_attempt_at,
        "next_trigger": system,  # a retry is the worker's doing, a recovery the sweeper's
        "next_triggered_by": None,
        "enqueued_at": None,
        "recovery": Recovery.NONE if succeeded else decision.recovery,
        "destination_ref": result.destination_ref,  # kept when empty
        "last_error": "" if succeeded else result.message,
        "completed_at": now if decision.status in Operation.DONE else None,
        "updated_at": now,
    }
    if result.outcome == Attempt.Outcome.WAITED:
        operation_sets["waits"] = operation.waits + 1  # the claim owns the row: no race
    reply = result.reply
    attempt_sets: dict[str, Any] = {
        "outcome": result.outcome,
        "finished_at": now,
        "error_class": result.error_class[:100],
        "error_message": result.message,
        "http_status": reply.code if reply and reply.protocol == "http" else None,
        "smtp_code": reply.code if reply and reply.protocol == "smtp" else None,
        "destination_ref": result.destination_ref,
        "adopted": result.adopted,
        "retry_after_seconds": result.retry_after,
    }
    return operation_sets, attempt_sets


def _late_outcome_keep(claim: Claim, result: AttemptResult, *, system: str) -> None:
    """The lease expired and the sweeper (or a replay) moved on. What this
    worker learned is still evidence, so it is kept, but not applied."""
    audit_record(
        action="late_outcome_discarded",
        system=system,
        operation=claim.operation,
        details={
            "attempt": claim.attempt.number,
            "outcome": result.outcome,
            "destination_ref": result.destination_ref,
            "message": result.message,
        },
    )
    logger.warning("operation %s: claim lost before the outcome was written", claim.operation.pk)


def _success_follow(
    operation: Operation, result: AttemptResult, *, now: datetime, cases_waiting: bool
) -> None:
    """What a success releases: the step's own follow-up, then the next step."""
    step = step_of(operation)
    if step.on_success is not None:
        step.on_success(operation, result.destination_ref)
    # A case waiting on this step (a replay, an email sent again) settles now, not when
    # queued; the outcome's statement said whether one is open.
    if cases_waiting:
        review_cases_settle_on_success(operation, now=now)
    operation_release_next(operation, now=now)


def _review_open(
    claim: Claim, result: AttemptResult, decision: Decision, *, system: str, now: datetime
) -> None:
    """What a decision for review opens: the case, naming the steps it holds."""
    operation = claim.operation
    held = operation_hold_later(operation, now=now)
    summary = decision.summary
    if held:
        summary += (
            f" Held until this case is settled: {', '.join(step for _, step in held)} "
            "(they run after a replay or a resolution, and are cancelled if it is closed)."
        )
    evidence = {
        "attempt": claim.attempt.number,
        "outcome": result.outcome,
        "error_class": result.error_class,
        "reply": str(result.reply) if result.reply else "",
        "message": result.message,
        "held_operations": [{"id": pk, "step": step} for pk, step in held],
        **(
            {"matched_records": list(result.matches), "create_anyway": result.create_anyway}
            if result.matches
            else {}
        ),
    }
    case, opened = review_case_open(
        kind=decision.case_kind,
        subject=operation_subject(operation.pk),
        summary=summary,
        operation=operation,
        evidence=evidence,
        system=system,
    )
    if not opened:
        # Its case was open, waiting on another try someone asked for: that try failed.
        review_case_requeue(case, summary=summary, evidence=evidence, system=system, now=now)
    else:
        # A try someone asked for failed another way: the new case replaces the old.
        review_cases_supersede(case, system=system, now=now)


def operation_hold_later(operation: Operation, *, now: datetime) -> list[tuple[int, str]]:
    """Puts the steps waiting behind `operation` in review with it, as (id, step).

    Call inside the transaction that puts `operation` in `needs_review`. The
    steps that wait for it (pending, not yet due) cannot run until a person
    settles its case, so they wait visibly, in `needs_review`, held by it.
    """
    waiting = Operation.objects.filter(
        event_id=operation.event_id,
        position__gt=operation.position,
        status=Operation.Status.PENDING,
        next_attempt_at__isnull=True,
    )
    held = list(waiting.order_by("position").values_list("pk", "step"))
    waiting.filter(pk__in=[pk for pk, _ in held]).update(
        status=Operation.Status.NEEDS_REVIEW, held_by=operation, updated_at=now
    )
    return held


def operation_unhold_later(operation: Operation, *, now: datetime) -> list[int]:
    """Puts the steps held behind `operation` back to waiting (pending, not due).

    Call when its case is settled with the step going on (a replay, a verified
    reference); after a verified reference, `operation_release_next` then makes
    the next one due.
    """
    held = Operation.objects.filter(held_by=operation, status=Operation.Status.NEEDS_REVIEW)
    ids = list(held.order_by("position").values_list("pk", flat=True))
    held.update(status=Operation.Status.PENDING, held_by=None, next_attempt_at=None, updated_at=now)
    return ids


def operation_release_next(operation: Operation, *, now: datetime) -> list[int]:
    """Makes the step after `operation` due and queues it, inside the transaction that
    records `operation` as succeeded."""
    chained = _chained.get()
    token = uuid.uuid4()
    released, taken = release_write(
        operation.pk,
        now=now,
        claim_next=None if chained is None else (token, _lease_until(now)),
        event=None if chained is None else operation.event,
    )
    if chained is not None:
        chained.extend(_claim_of(t, token=token, now=now) for t in taken)
    else:
        for operation_id in released:
            operation_enqueue(operation_id)
    return released
