"""Manual replay: a person asks for one more attempt of an operation under review."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from idempotency_core.audit.cases import review_cases_in_progress
from idempotency_core.audit.entries import audit_record
from idempotency_core.execution.confirmations import confirmation_within_limits
from idempotency_core.execution.destinations import capabilities_of
from idempotency_core.execution.engine import operation_enqueue
from idempotency_core.execution.outcomes import operation_unhold_later
from idempotency_core.execution.policy import Recovery
from idempotency_core.models import Attempt, Operation, ReviewCase
from idempotency_core.review.lookup import latest_lookup, lookup_can_answer
from idempotency_core.review.refusals import ReplayRefusedError
from integrations.base import Capabilities

REPLAY_PERMISSION = "idempotency_core.replay_operation"
# A Reviewer's: trying again where the engine proves it cannot make a second effect.
CHANGE_CASES_PERMISSION = "idempotency_core.change_reviewcase"


def replay_requires_destination_check(operation: Operation) -> bool:
    """True when an earlier attempt may have applied the effect and nothing at the
    destination can recognise a repeat: a person must look first."""
    return operation.recovery == Recovery.REVIEW


def operation_replay(
    *,
    operation_id: int,
    actor: User,
    reason: str,
    destination_checked: bool = False,
) -> Operation:
    """Schedules one more attempt with the original key, or refuses with a reason.

    Replay admins may replay whatever the rule allows, on their word that the effect
    is absent where that is asked; anyone who may change cases may where the engine
    proves it safe (`replay_proven_safe`)."""
    trusted = actor.has_perm(REPLAY_PERMISSION)
    if not trusted and not actor.has_perm(CHANGE_CASES_PERMISSION):
        raise PermissionDenied("Trying again needs the Reviewers or Replay admins role.")
    reason = reason.strip()
    if not reason:
        raise ReplayRefusedError("A replay needs a reason.")
    now = timezone.now()
    with transaction.atomic():
        operation = (
            Operation.objects.select_for_update().select_related("event").get(pk=operation_id)
        )
        facts = replay_facts(operation)
        refusal = replay_refusal(
            facts, destination_checked=_vouched(facts, trusted, destination_checked)
        )
        if refusal is not None:
            raise ReplayRefusedError(refusal)
        recovery, unheld = _replay_schedule(operation, actor=actor, now=now)
        cases = list(
            ReviewCase.objects.filter(operation=operation, status__in=ReviewCase.OPEN_STATUSES)
        )
        # The cases stay open, in progress, until the replayed attempt succeeds (the
        # engine settles them in the success's transaction, as a merge's); a replay
        # that fails again leaves them open with the new attempt on their page.
        review_cases_in_progress([c.pk for c in cases], actor=actor, now=now)
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
                "cases_waiting": [c.pk for c in cases],
                "unheld_operations": unheld,
            },
        )
        operation_enqueue(operation.pk)
    operation.refresh_from_db()
    return operation


def _vouched(facts: ReplayFacts, trusted: bool, destination_checked: bool) -> bool:
    """Whether the effect's absence is vouched for: a Replay admin's word, or, for anyone
    else, only the engine's proof (a lookup that found nothing stands for the word)."""
    if trusted:
        return destination_checked
    if not replay_proven_safe(facts):
        raise ReplayRefusedError(UNPROVEN)
    return facts.needs_check


def _replay_schedule(operation: Operation, *, actor: User, now: datetime) -> tuple[str, list[int]]:
    """Makes the operation due now under the same rules as a retry: (recovery, unheld)."""
    recovery = operation.recovery
    if recovery == Recovery.REVIEW:
        # The reviewer looked the effect up and found it absent.
        lookup = capabilities_of(operation.destination).lookup
        recovery = Recovery.LOOKUP_FIRST if lookup else Recovery.NONE
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
    return recovery, operation_unhold_later(operation, now=now)


@dataclass(frozen=True)
class ReplayFacts:
    """What the replay rule looks at, read from stored state only (no destination call)."""

    step: str
    status: str
    destination_ref: str
    # The first earlier step of the event that has not succeeded, if any.
    earlier_unfinished: str | None
    # An earlier attempt may have applied the effect and nothing can recognise a repeat.
    needs_check: bool
    # Onefold itself can ask the destination (its lookup, or a CRM's listing).
    lookup_can_answer: bool
    # The last recorded lookup: when, and whether it found the effect (and where).
    lookup_at: datetime | None
    lookup_found: bool | None
    lookup_refs: tuple[str, ...]
    last_attempt_started_at: datetime | None
    # A confirmation held by the sending limits (or an unchecked CAPTCHA) that they
    # would still hold now.
    limits_hold: bool = False
    # Held as a possible repeat of an earlier submission: a person decides whether it
    # is one ("same enquiry") or not ("separate enquiry"); another try decides nothing.
    held_as_duplicate: bool = False


def replay_facts(operation: Operation, *, capabilities: Capabilities | None = None) -> ReplayFacts:
    """Reads the facts of the replay rule. The replay calls it under the row lock;
    the console's preview calls it without one (and is re-checked on replay), with the
    destination's capabilities it has already read."""
    # A send again stands in for the send it repeats (cancelled): that one is not
    # an unfinished earlier step.
    replaces = [(operation.arguments or {}).get("sends_again") or 0]
    earlier = (
        Operation.objects.filter(event_id=operation.event_id, position__lt=operation.position)
        .exclude(status=Operation.Status.SUCCEEDED)
        .exclude(pk__in=replaces)
        .order_by("position")
        .values_list("step", flat=True)
        .first()
    )
    lookup = latest_lookup(operation)
    last_attempt = operation.attempts.order_by("-number").values_list("started_at", flat=True)
    return ReplayFacts(
        step=operation.step,
        status=operation.status,
        destination_ref=operation.destination_ref,
        earlier_unfinished=earlier,
        needs_check=replay_requires_destination_check(operation),
        lookup_can_answer=lookup_can_answer(operation, capabilities=capabilities),
        lookup_at=lookup.at if lookup is not None else None,
        lookup_found=lookup.details.get("found") if lookup is not None else None,
        lookup_refs=tuple(lookup.details.get("refs", [])) if lookup is not None else (),
        last_attempt_started_at=last_attempt.first(),
        limits_hold=operation.status == Operation.Status.NEEDS_REVIEW
        and not confirmation_within_limits(operation),
        held_as_duplicate=ReviewCase.objects.filter(
            operation=operation,
            kind=ReviewCase.Kind.DUPLICATE_HELD,
            status__in=ReviewCase.OPEN_STATUSES,
        ).exists(),
    )


UNPROVEN = (
    "Onefold cannot prove that trying again makes no second effect here, so it is a "
    "Replay admin's decision: hand the case on to them."
)


def replay_proven_safe(facts: ReplayFacts) -> bool:
    """The engine's own proof that one more attempt cannot make a second effect, so a
    Reviewer may ask for it without anyone's word: nothing earlier may have applied it
    (a refusal, a held confirmation now under its limits, a destination that recognises
    a repeat), or a lookup since the last attempt found nothing. Pure."""
    if facts.limits_hold:
        return False
    if not facts.needs_check:
        return True
    fresh = facts.lookup_at is not None and (
        facts.last_attempt_started_at is None or facts.lookup_at >= facts.last_attempt_started_at
    )
    return facts.lookup_can_answer and fresh and facts.lookup_found is False


def replay_refusal(facts: ReplayFacts, *, destination_checked: bool) -> str | None:
    """Why a replay is refused, for a person; None when it may go ahead. Pure."""
    Status = Operation.Status
    step = facts.step
    by_status: dict[str, str] = {
        Status.SUCCEEDED: f"{step} already succeeded (its reference "
        f"{facts.destination_ref or 'unknown'}); a replay would create a second effect.",
        Status.RUNNING: f"{step} is running now; wait for its outcome.",
        Status.PENDING: f"{step} is already scheduled to run.",
        Status.RETRY_SCHEDULED: f"{step} is already scheduled to run.",
        Status.CANCELLED: f"{step} was cancelled.",
    }
    if facts.status in by_status:
        return by_status[facts.status]
    if facts.held_as_duplicate:
        return (
            f"{step} waits because this submission may repeat an earlier one from the same "
            'person: decide with "Same enquiry" or "Separate enquiry". Trying it again '
            "would write it without that decision."
        )
    if facts.earlier_unfinished is not None:
        return f"An earlier step ({facts.earlier_unfinished}) has not succeeded; replay that first."
    if facts.needs_check:
        return _unless_checked_absent(facts, destination_checked=destination_checked)
    return None


def _unless_checked_absent(facts: ReplayFacts, *, destination_checked: bool) -> str | None:
    """The reviewer's word that the effect is absent, and, where the destination can be
    asked, a recorded lookup since the last attempt that found nothing."""
    # In a person's words: the console shows it as it is, on a case's page and on a bulk
    # replay's (the capabilities that would have recognised a repeat are the case's
    # technical details).
    unrecognisable = (
        f"{facts.step} may already have been done, and another try could not be recognised "
        "as a repeat, so it could be done twice."
    )
    if facts.lookup_can_answer:
        stale = facts.lookup_at is None or (
            facts.last_attempt_started_at is not None
            and facts.lookup_at < facts.last_attempt_started_at
        )
        if stale:
            return (
                f"{unrecognisable} Look it up first (the case page's lookup), then "
                "confirm it is absent."
            )
        if facts.lookup_found is True and facts.lookup_at is not None:
            return (
                f"The lookup of {facts.lookup_at:%Y-%m-%d %H:%M} UTC found the effect "
                f"({', '.join(facts.lookup_refs)}): mark the case resolved with that "
                "reference; a replay would duplicate it."
            )
    if not destination_checked:
        return (
            f"{unrecognisable} Look for it in the CRM or the mail service first, then confirm "
            "it is absent."
        )
    return None


# -- what a replay will run ---------------------------------------------------------


@dataclass(frozen=True)
class StepState:
    """One operation of the event, as the plan reads it (stored state only)."""

    pk: int
    step: str
    key: str
    position: int
    status: str
    held_by_id: int | None
    due: bool  # a next attempt is scheduled (next_attempt_at set)
    destination_ref: str


@dataclass(frozen=True)
class PlannedStep:
    """What a replay does to one step: "run" (with `key`), "done" (already happened:
    skipped), or "not_run" (this replay leaves it as it is)."""

    state: StepState
    effect: str


def replay_plan(replayed: StepState, steps: list[StepState]) -> list[PlannedStep]:
    """The steps a replay of `replayed` runs, in pipeline order. Pure: `replayed` and the
    unbroken run of waiting steps after it, as the engine releases them; a step already
    succeeded is skipped, anything else stops the run.
    """
    Status = Operation.Status
    plan: list[PlannedStep] = []
    last_run = replayed.position  # the position whose success releases the next
    for state in sorted(steps, key=lambda s: s.position):
        if state.pk == replayed.pk:
            effect = "run"
        elif state.status == Status.SUCCEEDED:
            effect = "done"
        else:
            waiting = (state.status == Status.NEEDS_REVIEW and state.held_by_id == replayed.pk) or (
                state.status == Status.PENDING and not state.due
            )
            runs = waiting and state.position == last_run + 1
            last_run = state.position if runs else last_run
            effect = "run" if runs else "not_run"
        plan.append(PlannedStep(state, effect))
    return plan


def replay_plan_for(operation: Operation) -> list[PlannedStep]:
    """`replay_plan` over the event's operations as stored now."""
    rows = Operation.objects.filter(event_id=operation.event_id).values_list(
        "pk",
        "step",
        "key",
        "position",
        "status",
        "held_by_id",
        "next_attempt_at",
        "destination_ref",
    )
    states = [
        StepState(pk, step, key, position, status, held, due is not None, ref)
        for pk, step, key, position, status, held, due, ref in rows
    ]
    replayed = next(s for s in states if s.pk == operation.pk)
    return replay_plan(replayed, states)
