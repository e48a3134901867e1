"""Pure decisions of the engine: retry delays and recovery after an unclear outcome."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from idempotency_core.models import Attempt, Operation, ReviewCase
from integrations.base import Capabilities

Recovery = Operation.Recovery


@dataclass(frozen=True)
class RetryPolicy:
    base_seconds: float
    max_seconds: float
    max_attempts: int
    # The longest a rate limit or a pause is waited for at once (a daily limit's reset).
    max_wait_seconds: float = 36 * 3600

    @classmethod
    def from_settings(cls) -> RetryPolicy:
        return cls(
            base_seconds=settings.ONEFOLD_RETRY_BASE_SECONDS,
            max_seconds=settings.ONEFOLD_RETRY_MAX_SECONDS,
            max_attempts=settings.ONEFOLD_MAX_ATTEMPTS,
            max_wait_seconds=settings.ONEFOLD_MAX_WAIT_SECONDS,
        )

    def ceiling(self, attempt_number: int) -> float:
        """Upper bound of the delay after attempt `attempt_number` (1-based)."""
        return min(self.max_seconds, self.base_seconds * 2.0 ** (attempt_number - 1))

    def delay(
        self,
        attempt_number: int,
        *,
        retry_after: float | None = None,
        rng: random.Random | None = None,
    ) -> float:
        """Exponential backoff with full jitter, never sooner than Retry-After asks, up to
        `max_seconds`: a longer Retry-After is cut there (the destination can ask again)."""
        jittered = (rng or random).uniform(0, self.ceiling(attempt_number))
        if retry_after is not None:
            return max(jittered, min(retry_after, self.max_seconds))
        return jittered


@dataclass(frozen=True)
class OperationState:
    """What `decide()` needs to know of the operation, read from its row and its step."""

    step: str
    attempt_number: int
    first_presented_at: datetime | None
    # The rule an earlier unclear attempt chose ("" when none did).
    current_recovery: str = Recovery.NONE
    # No idempotency at the destination: an unclear send goes to review, never resent.
    at_most_once: bool = False
    # Doing it twice is the same as once at the destination (a merge, an update).
    idempotent_action: bool = False
    # Earlier attempts that only waited (rate limit, paused destination): not counted.
    waits: int = 0

    @property
    def counted_attempts(self) -> int:
        """This attempt's number among those that count against the bound."""
        return max(1, self.attempt_number - self.waits)


@dataclass(frozen=True)
class AttemptReport:
    """What one attempt learned: its classified outcome and the destination's words."""

    outcome: str
    message: str = ""
    retry_after: float | None = None
    # The attempt was a lookup after an unclear one, it found nothing, and the
    # destination's lookup cannot prove absence (it lags writes).
    absence_unproven: bool = False
    # A refusal naming the records the destination says this create would duplicate.
    matches: tuple[str, ...] = ()
    # The destination would accept the create if told to allow a duplicate.
    create_anyway: bool = False
    # Onefold itself held the step before any call (confirmations.py): not sent.
    held: bool = False
    # Recovery was about to rely on a capability that, read again just now, no longer
    # holds: why (the capability and the destination's answer). Nothing was called.
    capability_lost: str = ""


def recovery_for(*, state: OperationState, capabilities: Capabilities, retry_at: datetime) -> str:
    """Chooses the recovery rule from what the destination offers (docs/architecture.md).

    An idempotency key counts only inside its retention window; a unique external
    reference at any age; a lookup alone only before creating.
    """
    if state.at_most_once:
        # A send is repeated only while the mail service still recognises its key
        # (Resend: 24 hours); SMTP recognises nothing, so a person decides.
        if capabilities.recognises_repeat_at(
            first_presented_at=state.first_presented_at, at=retry_at
        ):
            return Recovery.REPEAT_WITH_KEY
        return Recovery.REVIEW
    if state.idempotent_action:
        return Recovery.REPEAT
    if capabilities.recognises_repeat_at(first_presented_at=state.first_presented_at, at=retry_at):
        return Recovery.REPEAT_WITH_KEY
    if capabilities.unique_external_ref:
        return Recovery.REPEAT_UNIQUE_REF
    if capabilities.lookup:
        return Recovery.LOOKUP_FIRST
    return Recovery.REVIEW


@dataclass(frozen=True)
class Decision:
    """The operation's next state after an attempt, and the case to open, if any."""

    status: str
    next_attempt_at: datetime | None = None
    recovery: str = Recovery.NONE
    case_kind: str = ""
    summary: str = ""


def decide(
    *,
    state: OperationState,
    report: AttemptReport,
    capabilities: Capabilities | Callable[[], Capabilities],
    now: datetime,
    policy: RetryPolicy,
    rng: random.Random | None = None,
) -> Decision:
    """What follows an attempt's outcome. The operation never silently stops:
    every branch ends succeeded, scheduled for a retry, or with a review case; or
    cancelled, when the step itself found nothing to do and said why (skipped).
    `capabilities` (or the function giving them) is consulted after an unclear
    attempt only."""
    if report.outcome == Attempt.Outcome.SUCCEEDED:
        return Decision(status=Operation.Status.SUCCEEDED)
    if report.outcome == Attempt.Outcome.SKIPPED:
        # Onefold's own rule found nothing to do (a confirmation with no address): the
        # step ends, not failed, without a case; the steps after it go on.
        return Decision(status=Operation.Status.CANCELLED, summary=report.message)
    if report.outcome == Attempt.Outcome.PERMANENT:
        return _refused(state, report)
    if report.outcome == Attempt.Outcome.WAITED:
        # A rate limit or a paused destination: nothing applied, nothing counted; asked
        # again when the destination said, under the rule an earlier attempt chose.
        wait = min(max(report.retry_after or 1.0, 0.05), policy.max_wait_seconds)
        return Decision(
            status=Operation.Status.RETRY_SCHEDULED,
            next_attempt_at=now + timedelta(seconds=wait),
            recovery=state.current_recovery,
        )
    if report.capability_lost:
        return _capability_lost(state, report)
    unclear = report.outcome in (Attempt.Outcome.AMBIGUOUS, Attempt.Outcome.INTERRUPTED)
    retry_at = now + timedelta(
        seconds=policy.delay(state.counted_attempts, retry_after=report.retry_after, rng=rng)
    )
    # Retryable: nothing was applied by this attempt, so keep the rule of an
    # earlier unclear attempt, whose effect may still exist.
    rule = state.current_recovery
    if unclear:
        offered = capabilities() if callable(capabilities) else capabilities
        rule = recovery_for(state=state, capabilities=offered, retry_at=retry_at)
        if report.absence_unproven:
            return _absence_unprovable(state, report, rule=rule, capabilities=offered)
        if rule == Recovery.LOOKUP_FIRST:
            # A lagging lookup is worth asking only once the write could show.
            retry_at = max(retry_at, now + timedelta(seconds=offered.lookup_settle_seconds))
    if state.counted_attempts >= policy.max_attempts:
        return _exhausted(state, report, rule=rule, may_exist=unclear or bool(rule))
    if not unclear or rule != Recovery.REVIEW:
        return Decision(
            status=Operation.Status.RETRY_SCHEDULED, next_attempt_at=retry_at, recovery=rule
        )
    return _unrecognisable(state, report, rule=rule)


def _refused(state: OperationState, report: AttemptReport) -> Decision:
    if report.held:
        return _held(state, report)
    if report.matches:
        return _duplicate_rule(state, report)
    return Decision(
        status=Operation.Status.NEEDS_REVIEW,
        recovery=state.current_recovery,
        case_kind=ReviewCase.Kind.PERMANENT,
        summary=(
            f"{state.step} was refused: {report.message}. It is not retried automatically "
            "because the same request would be refused again. A reviewer should correct the "
            "cause (data, credentials, configuration) and replay, or close the case."
        ),
    )


def _held(state: OperationState, report: AttemptReport) -> Decision:
    """Onefold's own rule held the step before it called anyone: a person decides."""
    return Decision(
        status=Operation.Status.NEEDS_REVIEW,
        recovery=state.current_recovery,
        case_kind=ReviewCase.Kind.CONFIRMATION_HELD,
        summary=(
            f"{state.step} was held by Onefold, {report.message}. Nothing reached the mail "
            "service. A reviewer decides: a replay sends it (a person's decision is counted "
            "but not limited); closing the case means it is never sent."
        ),
    )


def _duplicate_rule(state: OperationState, report: AttemptReport) -> Decision:
    """The destination's duplicate rule matched existing records: a person decides."""
    choices = (
        "link the enquiry to one of them, or create it anyway (the rule only alerts)"
        if report.create_anyway
        else "link the enquiry to one of them (the rule blocks: creating anyway is refused)"
    )
    return Decision(
        status=Operation.Status.NEEDS_REVIEW,
        recovery=state.current_recovery,
        case_kind=ReviewCase.Kind.DUPLICATE_RULE,
        summary=(
            f"{state.step} was refused as a suspected duplicate of "
            f"{', '.join(report.matches)}: {report.message}. A reviewer should {choices}."
        ),
    )


def _exhausted(
    state: OperationState, report: AttemptReport, *, rule: str, may_exist: bool
) -> Decision:
    return Decision(
        status=Operation.Status.NEEDS_REVIEW,
        recovery=rule,
        case_kind=ReviewCase.Kind.RETRIES_EXHAUSTED,
        summary=(
            f"{state.step} failed {state.counted_attempts} times (last: {report.outcome}, "
            f"{report.message}). "
            + (
                "An attempt may have been applied: look the effect up in the destination "
                "before replaying (a replay follows the same recovery rule)."
                if may_exist
                else "No attempt reached the destination's commit, so a replay is safe "
                "once the destination is healthy."
            )
        ),
    )


def _unrecognisable(state: OperationState, report: AttemptReport, *, rule: str) -> Decision:
    """An unclear attempt the destination could not recognise if repeated: review."""
    what = f"{report.outcome}: {report.message}"
    if state.at_most_once:
        return Decision(
            status=Operation.Status.NEEDS_REVIEW,
            recovery=rule,
            case_kind=ReviewCase.Kind.INTERRUPTED_SEND,
            summary=(
                f"{state.step} may have been sent ({what}). The mail service cannot "
                "recognise a resend (plain SMTP has no idempotency; an idempotency key "
                "past its window is forgotten), so Onefold does not resend. A reviewer "
                "should check the mailbox or ask the customer, then mark resolved, or "
                "replay if it certainly was not sent."
            ),
        )
    return Decision(
        status=Operation.Status.NEEDS_REVIEW,
        recovery=rule,
        case_kind=ReviewCase.Kind.AMBIGUOUS,
        summary=(
            f"{state.step} may have been applied ({what}), and the destination offers no way "
            "to tell (no idempotency key within its window, no unique reference, no lookup). "
            "A reviewer should look for the effect in the destination, then mark resolved "
            "with its reference, or replay if it is certainly absent."
        ),
    )


def _capability_lost(state: OperationState, report: AttemptReport) -> Decision:
    """Recovery would have relied on a capability that no longer holds: a person decides."""
    return Decision(
        status=Operation.Status.NEEDS_REVIEW,
        recovery=Recovery.REVIEW,
        case_kind=ReviewCase.Kind.AMBIGUOUS,
        summary=(
            f"{state.step} may have been applied by an earlier attempt, and the way Onefold "
            f"would recognise it no longer holds: {report.capability_lost}. Repeating could "
            "make a duplicate, so Onefold does not. A reviewer should look for the effect "
            "in the destination, then mark resolved with its reference, or replay once the "
            "destination's setting is restored."
        ),
    )


def _absence_unprovable(
    state: OperationState, report: AttemptReport, *, rule: str, capabilities: Capabilities
) -> Decision:
    """The lookup after an unclear attempt found nothing, and its "nothing" proves nothing."""
    return Decision(
        status=Operation.Status.NEEDS_REVIEW,
        recovery=rule,
        case_kind=ReviewCase.Kind.AMBIGUOUS,
        summary=(
            f"{state.step} may have been applied ({report.message}). Onefold cannot tell: "
            "this destination's only lookup is a search that lags its writes, and it found "
            f"nothing {capabilities.lookup_settle_seconds:g} seconds after the attempt, which "
            "does not prove the effect absent; it has no unique reference or idempotency key "
            "to make a repeat safe, so repeating could make a duplicate. Onefold does not "
            "repeat it. A reviewer should look for the effect in the destination, then mark "
            "resolved with its reference, or replay if it is certainly absent."
        ),
    )
