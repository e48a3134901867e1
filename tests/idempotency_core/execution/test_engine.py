"""The engine against the real sandbox over loopback: claim, execute, record, release.

These call the services in-process (no broker) to prove the business rules; the
delivery behaviour of django-q2 is proven in tests/test_end_to_end.py with a real
cluster.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from idempotency_core.audit.entries import audit_record
from idempotency_core.execution.claims import operation_claim
from idempotency_core.execution.engine import operation_execute
from idempotency_core.execution.outcomes import operation_record_outcome
from idempotency_core.execution.perform import operation_perform as perform_attempt
from idempotency_core.execution.sweeper import operations_sweep
from idempotency_core.intake.ingest import event_status
from idempotency_core.models import Attempt, AuditEntry, Operation, ReviewCase
from tests.factories import ingest, op, run_pipeline


@pytest.mark.django_db
def test_a_submission_becomes_one_record_one_task_one_email(sandbox):
    event = ingest("e1")
    run_pipeline(event)
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 1)
    enquiry, task, email = (
        op(event, s) for s in ("create_enquiry", "assign_task", "send_confirmation")
    )
    assert stats["records_by_external_ref"] == {enquiry.key: 1}
    assert stats["tasks_by_external_ref"] == {task.key: 1}
    assert stats["messages_by_recipient"] == {"ada@example.com": 1}
    message = sandbox.messages()[0]
    assert message["message_id"] == f"<{email.key}@onefold>"
    # The customer is never given the CRM's record id: it means nothing to them.
    assert enquiry.destination_ref and enquiry.destination_ref not in message["body"]
    assert event_status(list(event.operations.values_list("status", flat=True))) == "completed"
    assert Attempt.objects.filter(outcome="succeeded").count() == 3


@pytest.mark.django_db
def test_later_steps_wait_for_earlier_ones(sandbox):
    event = ingest("e2")
    assert operation_execute(operation_id=op(event, "assign_task").pk) is None
    assert operation_execute(operation_id=op(event, "send_confirmation").pk) is None
    assert sandbox.stats()["tasks"] == 0
    assert operation_execute(operation_id=op(event, "create_enquiry").pk) == "succeeded"
    assert op(event, "assign_task").next_attempt_at is not None
    assert op(event, "send_confirmation").next_attempt_at is None


@pytest.mark.django_db
def test_the_same_operation_executed_twice_has_one_effect(sandbox):
    event = ingest("e3")
    first = op(event, "create_enquiry")
    assert operation_execute(operation_id=first.pk) == "succeeded"
    assert operation_execute(operation_id=first.pk) is None
    assert sandbox.stats()["records"] == 1
    assert first.attempts.count() == 1


@pytest.mark.django_db(
    transaction=True, serialized_rollback=True
)  # each thread commits its own claim
def test_the_same_operation_executed_twice_concurrently_has_one_effect(sandbox):
    rounds, parallel = 20, 4
    for round_number in range(rounds):
        event = ingest(f"race-{round_number}")
        target = op(event, "create_enquiry").pk
        barrier = threading.Barrier(parallel)
        outcomes: list[str | None] = []

        def worker(barrier=barrier, outcomes=outcomes, target=target) -> None:
            try:
                barrier.wait()
                outcomes.append(operation_execute(operation_id=target))
            finally:
                connection.close()

        threads = [threading.Thread(target=worker) for _ in range(parallel)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert outcomes.count(None) == parallel - 1, outcomes
        assert [o for o in outcomes if o is not None] == ["succeeded"], outcomes
    stats = sandbox.stats()
    assert stats["records"] == rounds
    assert set(stats["records_by_external_ref"].values()) == {1}
    assert Attempt.objects.count() == rounds


@pytest.mark.django_db
def test_a_worker_whose_lease_expired_cannot_overwrite_the_newer_state(sandbox):
    event = ingest("stale")
    enquiry = op(event, "create_enquiry")
    stale = operation_claim(operation_id=enquiry.pk)
    # The stale worker stalls past its lease; the sweeper takes over.
    Operation.objects.filter(pk=enquiry.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert operations_sweep().interrupted == 1
    enquiry.refresh_from_db()
    assert enquiry.status == "retry_scheduled"
    assert enquiry.recovery == "repeat_unique_ref"
    Operation.objects.filter(pk=enquiry.pk).update(next_attempt_at=timezone.now())
    assert operation_execute(operation_id=enquiry.pk) == "succeeded"
    # The stale worker wakes up, calls the CRM (refused as a duplicate and
    # adopted), and tries to record: the claim is gone, so nothing changes.
    late = perform_attempt(stale)
    assert late.outcome == "succeeded" and late.adopted
    assert operation_record_outcome(claim=stale, result=late) is False
    enquiry.refresh_from_db()
    assert enquiry.status == "succeeded"
    assert list(enquiry.attempts.order_by("number").values_list("outcome", flat=True)) == [
        "interrupted",
        "succeeded",
    ]
    assert (
        AuditEntry.objects.filter(action="late_outcome_discarded", operation=enquiry).count() == 1
    )
    assert sandbox.stats()["records"] == 1


@pytest.mark.django_db
def test_a_failed_task_step_never_recreates_the_enquiry(sandbox):
    event = ingest("boundary")
    assert operation_execute(operation_id=op(event, "create_enquiry").pk) == "succeeded"
    sandbox.fault("create_task", "http_400")
    assert operation_execute(operation_id=op(event, "assign_task").pk) == "permanent"
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["calls"]["create_record"]) == (1, 0, 1)
    case = ReviewCase.objects.get()
    assert case.kind == "permanent_failure"
    assert case.operation == op(event, "assign_task")
    assert event_status(list(event.operations.values_list("status", flat=True))) == "needs_review"


@pytest.mark.django_db
def test_audit_entries_cannot_be_changed_or_deleted():
    from django.db import DatabaseError, transaction

    entry = audit_record(action="probe", system="test")
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEntry.objects.filter(pk=entry.pk).update(reason="rewritten")
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEntry.objects.filter(pk=entry.pk).delete()
    assert AuditEntry.objects.get(pk=entry.pk).reason == ""
