"""Unit tests of the engine's pure decisions: backoff, recovery rules, next state.

No database and no network: these are the rules the integration tests then
prove on real parts.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idempotency_core.execution.policy import (
    AttemptReport,
    OperationState,
    Recovery,
    RetryPolicy,
    decide,
    recovery_for,
)
from idempotency_core.models import Operation, ReviewCase
from integrations.base import Capabilities

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(base_seconds=2, max_seconds=60, max_attempts=5)


def test_the_backoff_ceiling_doubles_up_to_the_maximum():
    assert [POLICY.ceiling(n) for n in range(1, 8)] == [2, 4, 8, 16, 32, 60, 60]


@given(attempt=st.integers(1, 30), seed=st.integers())
def test_full_jitter_stays_between_zero_and_the_ceiling(attempt, seed):
    delay = POLICY.delay(attempt, rng=random.Random(seed))
    assert 0 <= delay <= POLICY.ceiling(attempt)


@given(attempt=st.integers(1, 30), retry_after=st.floats(0, 1000), seed=st.integers())
def test_retry_after_is_honoured_up_to_the_maximum(attempt, retry_after, seed):
    delay = POLICY.delay(attempt, retry_after=retry_after, rng=random.Random(seed))
    assert delay >= min(retry_after, POLICY.max_seconds)
    assert delay <= max(POLICY.ceiling(attempt), POLICY.max_seconds)


def test_jitter_spreads_delays_rather_than_synchronising_them():
    rng = random.Random(1)
    delays = [POLICY.delay(4, rng=rng) for _ in range(1000)]
    assert min(delays) < 1 and max(delays) > 15
    assert 6 < sum(delays) / len(delays) < 10  # mean of U(0, 16) is 8


def split(flags: dict) -> tuple[OperationState, Capabilities]:
    """The flat flags of a test case as the operation's state and the destination's
    capabilities, the two values the policy takes."""
    state = OperationState(
        step=flags.get("step", "create_enquiry"),
        attempt_number=flags.get("attempt_number", 1),
        first_presented_at=flags["first_presented_at"],
        current_recovery=flags.get("current_recovery", ""),
        at_most_once=flags["at_most_once"],
    )
    capabilities = Capabilities(
        idempotency_keys=flags["idempotency_keys"],
        key_retention=flags["retention"],
        unique_external_ref=flags["unique_external_ref"],
        lookup=flags["lookup"],
        lookup_proves_absence=True,
    )
    return state, capabilities


def rule(**overrides):
    flags = {
        "at_most_once": False,
        "idempotency_keys": False,
        "retention": timedelta(hours=24),
        "unique_external_ref": False,
        "lookup": False,
        "first_presented_at": NOW,
        "retry_at": NOW + timedelta(minutes=1),
    } | overrides
    state, capabilities = split(flags)
    return recovery_for(state=state, capabilities=capabilities, retry_at=flags["retry_at"])


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"idempotency_keys": True}, Recovery.REPEAT_WITH_KEY),
        ({"unique_external_ref": True}, Recovery.REPEAT_UNIQUE_REF),
        ({"unique_external_ref": True, "lookup": True}, Recovery.REPEAT_UNIQUE_REF),
        ({"lookup": True}, Recovery.LOOKUP_FIRST),
        ({}, Recovery.REVIEW),
        # Email: at most once, unless the mail service recognises the key (Resend)...
        ({"at_most_once": True, "unique_external_ref": True, "lookup": True}, Recovery.REVIEW),
        ({"at_most_once": True, "idempotency_keys": True}, Recovery.REPEAT_WITH_KEY),
        # ...and only inside the key's window.
        (
            {"at_most_once": True, "idempotency_keys": True, "retry_at": NOW + timedelta(hours=25)},
            Recovery.REVIEW,
        ),
        # A key outside its retention window recognises nothing any more.
        ({"idempotency_keys": True, "retry_at": NOW + timedelta(hours=25)}, Recovery.REVIEW),
        (
            {"idempotency_keys": True, "lookup": True, "retry_at": NOW + timedelta(hours=25)},
            Recovery.LOOKUP_FIRST,
        ),
        ({"idempotency_keys": True, "retention": None}, Recovery.REPEAT_WITH_KEY),
        ({"idempotency_keys": True, "first_presented_at": None}, Recovery.REVIEW),
    ],
)
def test_the_recovery_rule_follows_what_the_destination_offers(flags, expected):
    assert rule(**flags) == expected


def decision(outcome: str, attempt: int = 1, **overrides):
    arguments = {
        "outcome": outcome,
        "step": "create_enquiry",
        "attempt_number": attempt,
        "message": "boom",
        "retry_after": None,
        "at_most_once": False,
        "idempotency_keys": False,
        "retention": None,
        "unique_external_ref": True,
        "lookup": True,
        "first_presented_at": NOW,
        "current_recovery": "",
        "now": NOW,
        "policy": POLICY,
        "rng": random.Random(0),
    }
    arguments |= overrides
    state, capabilities = split(arguments)
    report = AttemptReport(
        outcome=arguments["outcome"],
        message=arguments["message"],
        retry_after=arguments["retry_after"],
    )
    return decide(
        state=state,
        report=report,
        capabilities=capabilities,
        now=arguments["now"],
        policy=arguments["policy"],
        rng=arguments["rng"],
    )


def test_success_clears_everything():
    result = decision("succeeded")
    assert (result.status, result.case_kind) == (Operation.Status.SUCCEEDED, "")


def test_a_skipped_step_ends_cancelled_without_a_case():
    result = decision("skipped", message="not sent: no address")
    assert (result.status, result.case_kind) == (Operation.Status.CANCELLED, "")
    assert result.summary == "not sent: no address"


def test_permanent_errors_go_to_review_and_are_not_retried():
    result = decision("permanent")
    assert result.status == Operation.Status.NEEDS_REVIEW
    assert result.next_attempt_at is None
    assert result.case_kind == ReviewCase.Kind.PERMANENT
    assert "not retried" in result.summary


@pytest.mark.parametrize("create_anyway", [True, False])
def test_a_refusal_naming_matched_records_is_a_duplicate_rule_case(create_anyway):
    """A destination's duplicate rule: a person links or creates anyway, never a retry."""
    state = OperationState(step="create_enquiry", attempt_number=1, first_presented_at=NOW)
    report = AttemptReport(
        outcome="permanent", message="boom", matches=("00Q1", "00Q2"), create_anyway=create_anyway
    )
    result = decide(state=state, report=report, capabilities=Capabilities(), now=NOW, policy=POLICY)
    assert (result.status, result.next_attempt_at) == (Operation.Status.NEEDS_REVIEW, None)
    assert result.case_kind == ReviewCase.Kind.DUPLICATE_RULE
    assert "00Q1, 00Q2" in result.summary
    assert ("create it anyway" in result.summary) is create_anyway


def test_retryable_errors_are_retried_until_the_bound():
    for attempt in range(1, POLICY.max_attempts):
        result = decision("retryable", attempt)
        assert result.status == Operation.Status.RETRY_SCHEDULED
        assert NOW <= result.next_attempt_at <= NOW + timedelta(seconds=POLICY.ceiling(attempt))
    last = decision("retryable", POLICY.max_attempts)
    assert last.status == Operation.Status.NEEDS_REVIEW
    assert last.case_kind == ReviewCase.Kind.RETRIES_EXHAUSTED
    assert "replay is safe" in last.summary


def test_a_retry_after_an_unclear_attempt_keeps_its_caution():
    result = decision("retryable", 2, current_recovery=Recovery.LOOKUP_FIRST)
    assert result.recovery == Recovery.LOOKUP_FIRST


def test_exhausted_after_an_unclear_attempt_says_to_look_first():
    result = decision("ambiguous", POLICY.max_attempts, unique_external_ref=False)
    assert result.case_kind == ReviewCase.Kind.RETRIES_EXHAUSTED
    assert result.recovery == Recovery.LOOKUP_FIRST
    assert "look the effect up" in result.summary


def test_ambiguous_with_no_recognition_goes_to_review():
    result = decision("ambiguous", unique_external_ref=False, lookup=False)
    assert result.status == Operation.Status.NEEDS_REVIEW
    assert result.case_kind == ReviewCase.Kind.AMBIGUOUS
    assert result.recovery == Recovery.REVIEW


def test_an_interrupted_email_is_never_resent_automatically():
    result = decision("interrupted", at_most_once=True, unique_external_ref=True)
    assert result.status == Operation.Status.NEEDS_REVIEW
    assert result.case_kind == ReviewCase.Kind.INTERRUPTED_SEND


def test_an_interrupted_email_is_resent_with_its_key_inside_the_window_only():
    inside = decision(
        "ambiguous", at_most_once=True, idempotency_keys=True, retention=timedelta(hours=24)
    )
    assert inside.status == Operation.Status.RETRY_SCHEDULED
    assert inside.recovery == Recovery.REPEAT_WITH_KEY
    outside = decision(
        "ambiguous",
        at_most_once=True,
        idempotency_keys=True,
        retention=timedelta(hours=24),
        first_presented_at=NOW - timedelta(hours=25),
    )
    assert outside.status == Operation.Status.NEEDS_REVIEW
    assert outside.case_kind == ReviewCase.Kind.INTERRUPTED_SEND
    assert "past its window" in outside.summary


@given(
    outcome=st.sampled_from(
        ["succeeded", "retryable", "permanent", "ambiguous", "interrupted", "skipped"]
    ),
    attempt=st.integers(1, 10),
    at_most_once=st.booleans(),
    idempotency_keys=st.booleans(),
    unique_external_ref=st.booleans(),
    lookup=st.booleans(),
    current=st.sampled_from(list(Recovery)),
)
def test_an_operation_never_silently_stops(
    outcome, attempt, at_most_once, idempotency_keys, unique_external_ref, lookup, current
):
    result = decision(
        outcome,
        attempt,
        at_most_once=at_most_once,
        idempotency_keys=idempotency_keys,
        unique_external_ref=unique_external_ref,
        lookup=lookup,
        current_recovery=current,
    )
    if result.status == Operation.Status.RETRY_SCHEDULED:
        assert result.next_attempt_at is not None
        # Never a blind repeat after an unclear attempt.
        if outcome in ("ambiguous", "interrupted"):
            assert result.recovery != Recovery.NONE
            # A send is repeated only under a key the mail service still recognises.
            assert not at_most_once or result.recovery == Recovery.REPEAT_WITH_KEY
    elif result.status == Operation.Status.NEEDS_REVIEW:
        assert result.case_kind and result.summary
    elif result.status == Operation.Status.CANCELLED:
        # Only a step that found nothing to do ends so, saying why, without a case.
        assert outcome == "skipped" and result.summary and not result.case_kind
    else:
        assert result.status == Operation.Status.SUCCEEDED and outcome == "succeeded"
