"""A lookup that lags its writes (Pipedrive's search): asked after the settle delay,
what it finds is adopted, and its "not found" is a case, never a blind repeat.

The decisions are unit-tested on `decide()`; the whole path then runs end to end
through the engine against the real sandbox, its adapter told that the lookup
lags (SANDBOX_LOOKUP_SETTLE_SECONDS).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from idempotency_core.execution.destinations import capabilities_of, verification_forget
from idempotency_core.execution.engine import operation_execute
from idempotency_core.execution.policy import (
    AttemptReport,
    OperationState,
    Recovery,
    RetryPolicy,
    decide,
)
from idempotency_core.models import Attempt, Destination, Operation, ReviewCase
from integrations.base import Capabilities
from tests.factories import ingest, op

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(base_seconds=0.5, max_seconds=2, max_attempts=5)
LAGGING = Capabilities(lookup=True, lookup_proves_absence=False, lookup_settle_seconds=30)
STATE = OperationState(step="create_enquiry", attempt_number=1, first_presented_at=NOW)


def _never() -> Capabilities:
    raise AssertionError("capabilities were read although the outcome was clear")


@pytest.mark.parametrize("outcome", ["ambiguous", "interrupted"])
def test_an_unclear_create_is_looked_up_no_sooner_than_the_settle_delay(outcome):
    decision = decide(
        state=STATE,
        report=AttemptReport(outcome=outcome, message="HTTP 500"),
        capabilities=LAGGING,
        now=NOW,
        policy=POLICY,
    )
    assert decision.status == Operation.Status.RETRY_SCHEDULED
    assert decision.recovery == Recovery.LOOKUP_FIRST
    assert decision.next_attempt_at == NOW + timedelta(seconds=30)


def test_a_lookup_that_proves_absence_is_not_delayed():
    decision = decide(
        state=STATE,
        report=AttemptReport(outcome="ambiguous"),
        capabilities=Capabilities(lookup=True, lookup_proves_absence=True),
        now=NOW,
        policy=POLICY,
    )
    assert decision.recovery == Recovery.LOOKUP_FIRST
    assert decision.next_attempt_at is not None
    assert decision.next_attempt_at <= NOW + timedelta(seconds=POLICY.max_seconds)


def test_not_found_by_a_lagging_lookup_is_a_case_that_says_why():
    state = OperationState(
        step="create_enquiry",
        attempt_number=2,
        first_presented_at=NOW,
        current_recovery=Recovery.LOOKUP_FIRST,
    )
    decision = decide(
        state=state,
        report=AttemptReport(
            outcome="ambiguous", message="lookup found nothing", absence_unproven=True
        ),
        capabilities=LAGGING,
        now=NOW,
        policy=POLICY,
    )
    assert decision.status == Operation.Status.NEEDS_REVIEW
    assert decision.case_kind == ReviewCase.Kind.AMBIGUOUS
    assert decision.next_attempt_at is None
    assert "Onefold cannot tell" in decision.summary
    assert "only lookup is a search that lags its writes" in decision.summary
    assert "found nothing 30 seconds after the attempt" in decision.summary
    assert "repeating could make a duplicate" in decision.summary


@given(
    outcome=st.sampled_from(["ambiguous", "interrupted"]),
    attempt=st.integers(1, 5),
    settle=st.floats(0, 3600),
    unproven=st.booleans(),
)
def test_a_lagging_lookup_never_leads_to_a_blind_repeat(outcome, attempt, settle, unproven):
    capabilities = Capabilities(
        lookup=True, lookup_proves_absence=False, lookup_settle_seconds=settle
    )
    state = OperationState(step="create_enquiry", attempt_number=attempt, first_presented_at=NOW)
    decision = decide(
        state=state,
        report=AttemptReport(outcome=outcome, absence_unproven=unproven),
        capabilities=capabilities,
        now=NOW,
        policy=POLICY,
    )
    assert decision.recovery in (Recovery.LOOKUP_FIRST, Recovery.REVIEW)
    if decision.status == Operation.Status.RETRY_SCHEDULED:
        assert decision.next_attempt_at >= NOW + timedelta(seconds=settle)
    else:
        assert decision.case_kind


@pytest.mark.parametrize("outcome", ["succeeded", "retryable", "permanent"])
def test_capabilities_are_read_only_after_an_unclear_attempt(outcome):
    # The sandbox's capabilities cost a network read: a clear outcome needs none.
    decide(
        state=STATE,
        report=AttemptReport(outcome=outcome),
        capabilities=_never,
        now=NOW,
        policy=POLICY,
    )


# -- end to end: the engine, the sandbox, a lookup declared lagging ---------------

SETTLE = 0.6


@pytest.fixture
def lagging_sandbox(sandbox, monkeypatch, settings):
    """The sandbox without a unique reference or keys; its lookup taken as lagging."""
    sandbox.capabilities(unique_external_ref=False, idempotency_keys=False, lookup=True)
    monkeypatch.setenv("SANDBOX_LOOKUP_SETTLE_SECONDS", str(SETTLE))
    settings.ONEFOLD_RETRY_BASE_SECONDS = 0.01
    settings.ONEFOLD_RETRY_MAX_SECONDS = 0.02
    verification_forget()
    read = capabilities_of(Destination.objects.get(name="crm"))
    assert (read.lookup_proves_absence, read.lookup_settle_seconds) == (False, SETTLE)
    return sandbox


def _run_when_due(operation: Operation) -> str | None:
    operation.refresh_from_db()
    assert operation.next_attempt_at is not None
    time.sleep(max(0.0, (operation.next_attempt_at - _db_now()).total_seconds()) + 0.05)
    return operation_execute(operation_id=operation.pk)


def _db_now() -> datetime:
    return timezone.now()


@pytest.mark.django_db
def test_a_lost_answer_is_found_after_the_settle_delay_and_adopted(lagging_sandbox):
    lagging_sandbox.fault("create_record", "drop_response_after_commit")
    enquiry = op(ingest("lag-found"), "create_enquiry")
    started = _db_now()
    assert operation_execute(operation_id=enquiry.pk) == "ambiguous"
    enquiry.refresh_from_db()
    assert enquiry.recovery == Recovery.LOOKUP_FIRST
    assert enquiry.next_attempt_at >= started + timedelta(seconds=SETTLE)
    assert _run_when_due(enquiry) == "succeeded"
    second = Attempt.objects.get(operation=enquiry, number=2)
    assert second.adopted and second.started_at >= started + timedelta(seconds=SETTLE)
    stats = lagging_sandbox.stats()
    assert stats["records_by_external_ref"] == {enquiry.key: 1}
    assert stats["calls"]["create_record"] == 1  # found, never created again


@pytest.mark.django_db
def test_not_found_after_the_settle_delay_is_a_case_and_never_a_second_create(
    lagging_sandbox,
):
    # A 500 before anything was stored: the effect is absent, but a lagging
    # search cannot prove it, so a person decides.
    lagging_sandbox.fault("create_record", "fail_before_commit")
    event = ingest("lag-absent")
    enquiry = op(event, "create_enquiry")
    assert operation_execute(operation_id=enquiry.pk) == "ambiguous"
    assert _run_when_due(enquiry) == "ambiguous"
    enquiry.refresh_from_db()
    assert enquiry.status == Operation.Status.NEEDS_REVIEW
    case = ReviewCase.objects.get(operation=enquiry)
    assert case.kind == ReviewCase.Kind.AMBIGUOUS
    assert "only lookup is a search that lags its writes" in case.summary
    assert "repeating could make a duplicate" in case.summary
    assert Attempt.objects.get(operation=enquiry, number=2).error_class == "AbsenceUnproven"
    stats = lagging_sandbox.stats()
    assert stats["records"] == 0 and stats["calls"]["create_record"] == 1
    assert op(event, "assign_task").status == Operation.Status.NEEDS_REVIEW  # held
