"""The replay page's preview is what the workers then do.

End to end: a real case made against the sandbox, the preview rendered by the
console, the replay confirmed through the console, a real django-q2 cluster
running what it queued. The steps the preview says run are exactly the steps
that get a new attempt, each presenting the key the preview shows (the sandbox
records the external reference or Message-ID it received); the steps it says are
skipped get none and their effect is not repeated.

Real processes and commits (`transaction=True`): the cluster reads the operations
from the test database through its own connections.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import Attempt, Operation, ReviewCase
from idempotency_core.review.lookup import operation_destination_lookup
from integrations.smtp.adapter import message_id_for
from tests.factories import crm_without_recognition, ingest
from tests.support.processes import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

ROW = re.compile(
    r'<tr class="plan-\w+" data-step="([^"]+)" data-effect="(\w+)">.*?'
    r"<span class=\"mono small\" data-key>([^<]+)</span>",
    re.S,
)


def _preview(client: Client, case: ReviewCase) -> list[tuple[str, str, str]]:
    """(step, effect, key) per row of the replay confirmation page."""
    page = client.post(reverse("console:case-replay", args=[case.pk]))
    assert page.status_code == 200
    return ROW.findall(page.content.decode())


def _task_refused(sandbox) -> ReviewCase:
    """The enquiry made, its task refused for good (HTTP 400): the email waits behind it."""
    event = ingest("preview-task", message="Please call me about the boiler.")
    assert operation_execute(operation_id=event.operations.get(step="create_enquiry").pk) == (
        "succeeded"
    )
    sandbox.fault("create_task", "http_400")
    task = event.operations.get(step="assign_task")
    operation_execute(operation_id=task.pk)
    assert event.operations.get(step="send_confirmation").held_by_id == task.pk
    return ReviewCase.objects.get(operation=task)


def _enquiry_unclear(sandbox, admin) -> ReviewCase:
    """The first create failed before the CRM committed it, and a lookup says so."""
    crm_without_recognition(sandbox)
    sandbox.fault("create_record", "fail_before_commit")
    event = ingest("preview-enquiry", message="Please quote for a new roof.")
    operation = event.operations.get(step="create_enquiry")
    operation_execute(operation_id=operation.pk)
    case = ReviewCase.objects.get(operation=operation)
    assert (
        operation_destination_lookup(operation_id=operation.pk, actor=admin, case=case).found
        is False
    )
    return case


# What each scenario's preview must say, written out: a preview that listed nothing,
# or everything as run, would fail here before the workers are compared with it.
EXPECTED = {
    "task_refused": {"create_enquiry": "done", "assign_task": "run", "send_confirmation": "run"},
    "enquiry_unclear": {"create_enquiry": "run", "assign_task": "run", "send_confirmation": "run"},
}


@pytest.mark.parametrize("scenario", ["task_refused", "enquiry_unclear"])
def test_the_replay_preview_is_what_the_workers_run(users, sandbox, qcluster_factory, scenario):
    admin = users["replay_admin"]
    case = (
        _task_refused(sandbox) if scenario == "task_refused" else _enquiry_unclear(sandbox, admin)
    )
    client = Client()
    client.force_login(admin)
    preview = _preview(client, case)
    operations = {o.step: o for o in Operation.objects.filter(event_id=case.event_id)}
    assert [step for step, _, _ in preview] == sorted(
        operations, key=lambda s: operations[s].position
    )
    assert all(key == operations[step].key for step, _, key in preview)  # the original keys
    assert {step: effect for step, effect, _ in preview} == EXPECTED[scenario]
    runs = {step for step, effect, _ in preview if effect == "run"}

    replayed_at = timezone.now()
    confirmed = client.post(
        reverse("console:case-replay", args=[case.pk]),
        {"confirm": "yes", "reason": "The CRM fixed it", "destination_checked": "on"},
    )
    assert confirmed.status_code == 302
    qcluster_factory()
    wait_for(
        lambda: (
            Operation.objects.filter(
                event_id=case.event_id, step__in=runs, status="succeeded"
            ).count()
            == len(runs)
        ),
        timeout=60,
        what="the previewed steps to succeed",
    )
    ran = set(
        Attempt.objects.filter(
            operation__event_id=case.event_id, started_at__gte=replayed_at
        ).values_list("operation__step", flat=True)
    )
    assert ran == runs  # exactly the previewed steps ran, nothing else
    after = sandbox.stats()
    keys = {step: key for step, _, key in preview}
    assert after["records_by_external_ref"] == {keys["create_enquiry"]: 1}
    assert after["tasks_by_external_ref"] == {keys["assign_task"]: 1}
    assert after["messages_by_message_id"] == {message_id_for(keys["send_confirmation"]): 1}
    assert after["records"] == after["tasks"] == after["messages"] == 1
    case.refresh_from_db()
    assert case.status == ReviewCase.Status.RESOLVED
