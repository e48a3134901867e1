"""A submission without an email address: its confirmation is skipped, visibly.

The step ends `cancelled` with "not sent: no address" (an attempt of outcome
`skipped`), without a case and before the confirmation limits count anything;
the steps after it go on, and the event completes. Against the sandbox.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from idempotency_core.execution.confirmations import NO_ADDRESS
from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.ingest import event_status
from idempotency_core.models import ConfirmationAllowance, Event, ReviewCase, Source
from tests.factories import ingest, make_user, op

pytestmark = pytest.mark.django_db


def steps_run(event: Event) -> list[str | None]:
    return [
        operation_execute(operation_id=operation.pk)
        for operation in event.operations.order_by("position")
    ]


def test_no_address_skips_the_confirmation_without_a_case_or_an_allowance(sandbox):
    event = ingest("no-address-1", contact={"name": "Ada Lovelace", "phone": "+44 20 7946 0000"})
    assert steps_run(event) == ["succeeded", "succeeded", "skipped"]
    confirmation = op(event, "send_confirmation")
    assert (confirmation.status, confirmation.last_error) == ("cancelled", NO_ADDRESS)
    assert confirmation.completed_at is not None
    statuses = list(event.operations.values_list("status", flat=True))
    assert event_status(statuses) == "completed"
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 0)
    assert not ReviewCase.objects.exists()
    assert not ConfirmationAllowance.objects.exists()


def test_a_skipped_confirmation_releases_the_step_after_it(sandbox):
    """A source may confirm before it assigns the task: the skip does not stop it."""
    source = Source.objects.create(name="website", key_salt="salt-for-this-test")
    source.pipelines = {"*": ["create_enquiry", "send_confirmation", "assign_task"]}
    source.save(update_fields=["pipelines"])
    event = ingest("no-address-2", contact={"name": "Ada Lovelace"})
    confirmation = op(event, "send_confirmation")
    assert operation_execute(operation_id=op(event, "create_enquiry").pk) == "succeeded"
    assert operation_execute(operation_id=confirmation.pk) == "skipped"
    task = op(event, "assign_task")
    assert task.next_attempt_at is not None  # released, as after a success
    assert operation_execute(operation_id=task.pk) == "succeeded"
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 0)


def test_the_submission_page_says_not_sent_no_address(sandbox):
    event = ingest("no-address-3", contact={"name": "Ada Lovelace"})
    steps_run(event)
    client = Client()
    client.force_login(make_user("reader", groups=("Reviewers",)))
    page = client.get(reverse("console:submission-detail", args=[event.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "not sent: no address" in html
    assert "Send the confirmation email" in html
