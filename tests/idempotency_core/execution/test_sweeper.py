"""The sweeper: lost tasks queued again, expired leases recovered, never twice."""

from __future__ import annotations

import io
import threading
from datetime import datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
from django_q.models import OrmQ, Schedule

from idempotency_core.execution.claims import operation_claim
from idempotency_core.execution.engine import operation_execute
from idempotency_core.execution.sweeper import operations_sweep, requeue_grace
from idempotency_core.models import Operation
from tests.factories import ingest, op


def lose_tasks() -> None:
    """As if the broker dropped every message (Redis restart, signature change...)."""
    OrmQ.objects.all().delete()
    age_queued_tasks()


def age_queued_tasks() -> datetime:
    """Makes every queued operation look queued (and due) longer than the grace ago."""
    past = timezone.now() - requeue_grace() - timedelta(seconds=1)
    Operation.objects.filter(next_attempt_at__isnull=False).update(
        next_attempt_at=past, enqueued_at=past
    )
    return past


@pytest.mark.django_db
def test_a_lost_task_is_queued_again_once():
    event = ingest("lost")
    lose_tasks()
    assert operations_sweep().requeued == 1
    assert OrmQ.objects.count() == 1
    # Within the grace period the new task is presumed alive: no second copy.
    assert operations_sweep().requeued == 0
    assert op(event, "create_enquiry").enqueued_at > timezone.now() - timedelta(seconds=5)


@pytest.mark.django_db
def test_a_backlog_is_not_mistaken_for_lost_tasks():
    ingest("behind")
    late = ingest("late")
    OrmQ.objects.filter(pk=OrmQ.objects.order_by("-pk").first().pk).delete()  # late's task lost
    past = age_queued_tasks()
    # The other task still waits in the queue: the workers are behind, not lost.
    assert operations_sweep().requeued == 0
    OrmQ.objects.all().delete()
    assert operations_sweep().requeued == 2
    assert op(late, "create_enquiry").enqueued_at > past


@pytest.mark.django_db
def test_steps_waiting_for_an_earlier_one_are_not_queued():
    ingest("waiting")
    lose_tasks()
    operations_sweep()
    assert (
        Operation.objects.filter(enqueued_at__gt=timezone.now() - timedelta(seconds=5)).count() == 1
    )


@pytest.mark.django_db
def test_an_expired_lease_becomes_an_interrupted_attempt(sandbox):
    event = ingest("expired")
    enquiry = op(event, "create_enquiry")
    claim = operation_claim(operation_id=enquiry.pk)
    assert claim is not None
    assert operations_sweep().interrupted == 0  # lease still valid
    Operation.objects.filter(pk=enquiry.pk).update(lease_expires_at=timezone.now())
    assert operations_sweep().interrupted == 1
    enquiry.refresh_from_db()
    assert enquiry.status == "retry_scheduled"
    assert enquiry.attempts.get().outcome == "interrupted"
    # The recovery attempt is the sweeper's doing, and the timeline says so.
    Operation.objects.filter(pk=enquiry.pk).update(next_attempt_at=timezone.now())  # backoff over
    assert operation_execute(operation_id=enquiry.pk) == "succeeded"
    recovered = enquiry.attempts.get(number=2)
    assert (recovered.trigger, recovered.outcome) == ("sweeper", "succeeded")
    assert sandbox.stats()["records"] == 1


@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # sweepers race for real
def test_concurrent_sweepers_never_queue_an_operation_twice():
    for i in range(60):
        ingest(f"many-{i}")
    # Sixty retries fall due at once, with nothing on the queue for them.
    OrmQ.objects.all().delete()
    Operation.objects.filter(step="create_enquiry").update(
        status="retry_scheduled", next_attempt_at=timezone.now(), enqueued_at=None
    )
    barrier = threading.Barrier(4)
    requeued: list[int] = []

    def sweeper() -> None:
        try:
            barrier.wait()
            requeued.append(operations_sweep(batch_size=25).requeued)
            requeued.append(operations_sweep(batch_size=25).requeued)
        finally:
            connection.close()

    threads = [threading.Thread(target=sweeper) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(requeued) == 60
    assert OrmQ.objects.count() == 60


@pytest.mark.django_db
def test_sweep_command_reports_what_it_did():
    out = io.StringIO()
    call_command("sweep", stdout=out)
    assert out.getvalue().strip() == "interrupted=0 requeued=0"


@pytest.mark.django_db
def test_the_sweeper_schedule_exists_once():
    schedule = Schedule.objects.get(name="onefold-sweep")
    assert schedule.func == "idempotency_core.tasks.sweep"
    assert schedule.schedule_type == Schedule.MINUTES and schedule.minutes == 1
