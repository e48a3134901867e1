"""Recording an attempt's outcome under its claim token, and what it releases or holds.

A success releases the next step in the same statement; a decision for review opens
the case and holds the steps behind it, in one transaction.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone

from idempotency_core.audit.cases import (
    review_case_open,
    review_case_requeue,
    review_cases_settle_on_success,
    review_cases_supersede,
)
from idempotency_core.audit.entries import audit_record
from idempotency_core.audit.subjects import operation_subject
from idempotency_core.execution.claims import Claim, chain_collector, claim_of, lease_until
from idempotency_core.execution.confirmations import Allowance, AllowanceAsk
from idempotency_core.execution.content import next_content_render
from idempotency_core.execution.enqueue import operation_enqueue
from idempotency_core.execution.perform import AttemptResult, operation_state
from idempotency_core.execution.policy import (
    Decision,
    Recovery,
    RetryPolicy,
    decide,
)
from idempotency_core.execution.statements import Decided, Written, outcome_write, release_write
from idempotency_core.execution.steps import capabilities_for, confirmation_recipient, step_of
from idempotency_core.models import Attempt, Operation

logger = logging.getLogger(__name__)


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
        report=result,
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
    chained = chain_collector()
    token = uuid.uuid4()
    ahead = None if chained is None else _ahead_of(claim, result, now=now)
    written = _outcome_statement(
        claim,
        result,
        decision,
        system=system,
        now=now,
        release_next=True,
        claim_next=None if chained is None else (token, lease_until(now)),
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
            claim_of(taken, token=token, allowance=_allowance_of(ask, decided))
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
    chained = chain_collector()
    token = uuid.uuid4()
    released, taken = release_write(
        operation.pk,
        now=now,
        claim_next=None if chained is None else (token, lease_until(now)),
        event=None if chained is None else operation.event,
    )
    if chained is not None:
        chained.extend(claim_of(t, token=token) for t in taken)
    else:
        for operation_id in released:
            operation_enqueue(operation_id)
    return released
