"""The per-recipient limit holds across real, parallel workers.

Six submissions to one address, six worker processes of a django-q2 cluster, the
sandbox CRM and SMTP sink. The race is made certain, not left to timing: the test
holds the allowance table (EXCLUSIVE: reads pass, writes wait) until all six
workers are inside the decision, each having read the count, then lets them go. Each
worker runs its submission's steps as a chain, so it decides in the statement that
records the task's success and claims the confirmation.
Without the advisory locks each would have counted none sent and all six would send;
with them, the first takes its place and the others wait their turn and count again.

Real commits (`transaction=True`): the workers are other processes.
"""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from idempotency_core.models import ConfirmationAllowance, Operation, ReviewCase
from tests.factories import ingest
from tests.support.processes import database_url, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

SUBMISSIONS = 6


def lock_waiters() -> int:
    """Backends of this database waiting for a lock (a table's or an advisory one)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE NOT l.granted AND a.datname = current_database()"
        )
        (waiting,) = cursor.fetchone()
    return int(waiting)


def test_six_concurrent_submissions_to_one_address_send_exactly_three(sandbox, qcluster_factory):
    # One worker for each submission, each running its submission's steps in turn; a
    # task (and its lease) outlasts the wait at the table.
    qcluster_factory(
        "confirmations",
        ONEFOLD_Q_WORKERS=str(SUBMISSIONS),
        ONEFOLD_Q_TIMEOUT="60",
        ONEFOLD_LEASE_SECONDS="90",
        # The product's default (config/test_settings.py lifts it for the suite).
        ONEFOLD_CONFIRMATIONS_PER_RECIPIENT_PER_DAY="3",
    )
    table = ConfirmationAllowance._meta.db_table
    holder = psycopg.connect(database_url())
    try:
        holder.execute(f'LOCK TABLE "{table}" IN EXCLUSIVE MODE')
        events = [
            ingest(
                f"race-{n}",
                contact={"name": "Grace Hopper", "email": "Grace@Example.com"},
                message=f"Enquiry {n} of the race.",
            )
            for n in range(SUBMISSIONS)
        ]
        wait_for(
            lambda: lock_waiters() >= SUBMISSIONS,
            timeout=60,
            interval=0.1,
            what="six workers inside the confirmation's decision",
        )
        # Each worker decides in the statement that records its task's success and
        # claims the confirmation (a worker's chain), not committed while it waits.
        assert (
            Operation.objects.filter(event__in=events, step="assign_task", status="running").count()
            == SUBMISSIONS
        )
    finally:
        holder.rollback()  # releases the table
        holder.close()

    emails = Operation.objects.filter(event__in=events, step="send_confirmation")
    wait_for(
        lambda: not emails.filter(status__in=["pending", "running", "retry_scheduled"]).exists(),
        timeout=60,
        interval=0.2,
        what="every confirmation to be decided",
    )
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (6, 6, 3), stats
    assert (
        sorted(emails.values_list("status", flat=True)) == ["needs_review"] * 3 + ["succeeded"] * 3
    )
    held = ReviewCase.objects.filter(operation__in=emails, status="open")
    assert sorted(held.values_list("kind", flat=True)) == ["confirmation_held"] * 3
    assert ConfirmationAllowance.objects.count() == 3
