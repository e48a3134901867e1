"""Bulk replay in the background, for real: the console starts the job, a django-q2
cluster runs it and then the replayed operations, and the CRM ends with one record
per replayed case.

Real processes and commits (`transaction=True`): the cluster reads the job and the
operations from the test database through its own connections.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from idempotency_core.models import Operation
from review_console.models import BulkReplayJob
from tests.factories import permanent_case
from tests.support.processes import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def test_a_bulk_replay_runs_in_the_background_and_each_item_creates_one_record(
    users, sandbox, qcluster_factory
):
    cases = [permanent_case(f"cluster-bulk-{i}") for i in range(3)]
    client = Client()
    client.force_login(users["replay_admin"])
    response = client.post(
        reverse("console:bulk-replay-new"),
        {"kind": "permanent_failure", "confirm": "yes", "reason": "CRM fixed the validation"},
    )
    job = BulkReplayJob.objects.get()
    assert response["Location"] == reverse("console:bulk-replay-detail", args=[job.pk])
    running = client.get(response["Location"])
    assert b'http-equiv="refresh"' in running.content  # progress page refreshes itself

    qcluster_factory()
    wait_for(
        lambda: BulkReplayJob.objects.get(pk=job.pk).status == "finished",
        timeout=60,
        what="the bulk replay job to finish",
    )
    wait_for(
        lambda: all(Operation.objects.get(pk=c.operation_id).status == "succeeded" for c in cases),
        timeout=60,
        what="the replayed operations to succeed",
    )
    stats = sandbox.stats()
    assert stats["records"] == 3
    assert set(stats["records_by_external_ref"].values()) == {1}
    done = client.get(reverse("console:bulk-replay-detail", args=[job.pk]))
    assert b"3 of 3 done" in done.content and b'http-equiv="refresh"' not in done.content
