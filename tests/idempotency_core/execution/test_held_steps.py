"""A step in review holds the steps after it: they wait in `needs_review`, named by
its case, and follow its fate (back in line after a replay or a verified
reference, cancelled when the case is closed). Against the sandbox over loopback.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse

from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.ingest import event_status
from idempotency_core.models import AuditEntry, Event, Operation, ReviewCase
from idempotency_core.review.cases import case_close, case_mark_resolved
from idempotency_core.review.refusals import ReplayRefusedError
from idempotency_core.review.replay import operation_replay
from integrations.sandbox.adapter import SandboxCrm
from tests.factories import ingest, op

pytestmark = pytest.mark.django_db

LATER = ("assign_task", "send_confirmation")


@pytest.fixture
def admin_user() -> User:
    user = User.objects.create_user("replayer", is_staff=True)
    user.groups.add(Group.objects.get(name="Replay admins"))
    return User.objects.get(pk=user.pk)


def refused_enquiry(sandbox, key: str) -> Event:
    """An event whose enquiry the CRM refused (HTTP 400): a permanent_failure case."""
    sandbox.fault("create_record", "http_400")
    event = ingest(key)
    assert operation_execute(operation_id=op(event, "create_enquiry").pk) == "permanent"
    return event


def statuses(event: Event) -> dict[str, tuple[str, str | None]]:
    """step -> (status, the step holding it)."""
    return {
        o.step: (o.status, o.held_by.step if o.held_by else None)
        for o in event.operations.select_related("held_by")
    }


def test_a_step_in_review_holds_the_later_ones_and_its_case_names_them(sandbox, admin_user):
    event = refused_enquiry(sandbox, "held-1")

    assert statuses(event) == {
        "create_enquiry": ("needs_review", None),
        "assign_task": ("needs_review", "create_enquiry"),
        "send_confirmation": ("needs_review", "create_enquiry"),
    }
    (case,) = ReviewCase.objects.filter(event=event)
    assert case.operation == op(event, "create_enquiry")
    assert case.evidence["held_operations"] == [
        {"id": op(event, step).pk, "step": step} for step in LATER
    ]
    assert "Held until this case is settled: assign_task, send_confirmation" in case.summary
    assert event_status(list(event.operations.values_list("status", flat=True))) == ("needs_review")
    # The case page says so against each held step.
    client = Client()
    client.force_login(admin_user)
    page = client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    assert page.count("Not tried yet: it waits for this case.") == 2
    # A held step cannot be replayed on its own: its enquiry comes first.
    with pytest.raises(ReplayRefusedError, match="earlier step"):
        operation_replay(operation_id=op(event, "assign_task").pk, actor=admin_user, reason="x")
    assert sandbox.stats()["records"] == 0


def test_a_replay_puts_held_steps_back_in_line_and_they_run_in_order(sandbox, admin_user):
    event = refused_enquiry(sandbox, "held-2")
    enquiry = op(event, "create_enquiry")

    operation_replay(operation_id=enquiry.pk, actor=admin_user, reason="CRM field fixed")

    task, email = (op(event, step) for step in LATER)
    assert (task.status, task.held_by_id, task.next_attempt_at) == ("pending", None, None)
    assert (email.status, email.held_by_id, email.next_attempt_at) == ("pending", None, None)
    replay = AuditEntry.objects.get(action="replay", operation=enquiry)
    assert replay.details["unheld_operations"] == [task.pk, email.pk]

    # Released one at a time by the success before them, as in normal processing.
    assert operation_execute(operation_id=email.pk) is None  # not due yet
    assert operation_execute(operation_id=enquiry.pk) == "succeeded"
    assert operation_execute(operation_id=email.pk) is None  # waits for the task
    assert operation_execute(operation_id=task.pk) == "succeeded"
    assert operation_execute(operation_id=email.pk) == "succeeded"
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 1)
    assert event_status(list(event.operations.values_list("status", flat=True))) == "completed"


def test_a_replay_refused_again_holds_them_again_under_its_case(sandbox, admin_user):
    event = refused_enquiry(sandbox, "held-3")
    enquiry = op(event, "create_enquiry")
    first = ReviewCase.objects.get(operation=enquiry)

    operation_replay(operation_id=enquiry.pk, actor=admin_user, reason="try once more")
    sandbox.fault("create_record", "http_400")
    assert operation_execute(operation_id=enquiry.pk) == "permanent"

    # The replay did not work: its case, back in the queue (open, nobody's),
    # holds them again (a replay settles its case only when it succeeds).
    second = ReviewCase.objects.get(operation=enquiry)
    assert (second.pk, second.status, second.owner_id) == (first.pk, "open", None)
    assert [h["step"] for h in second.evidence["held_operations"]] == list(LATER)
    assert {step: s for step, s in statuses(event).items() if step in LATER} == {
        step: ("needs_review", "create_enquiry") for step in LATER
    }


def test_a_verified_reference_releases_the_next_step(sandbox, admin_user):
    event = refused_enquiry(sandbox, "held-4")
    enquiry = op(event, "create_enquiry")
    # Staff created the enquiry in the CRM by hand, with the operation's reference (the
    # case page shows it), then give the record's id.
    made_by_hand = SandboxCrm(sandbox.url, timeout=5).create_record(
        external_ref=enquiry.key, fields={"name": "Ada", "email": "ada@example.com"}
    )
    case = ReviewCase.objects.get(operation=enquiry)

    case_mark_resolved(
        case_id=case.pk, actor=admin_user, destination_ref=made_by_hand.ref, reason="made by hand"
    )

    task, email = (op(event, step) for step in LATER)
    assert (task.status, task.held_by_id) == ("pending", None) and task.next_attempt_at
    assert (email.status, email.held_by_id, email.next_attempt_at) == ("pending", None, None)
    resolved = AuditEntry.objects.get(action="case_resolved", case=case)
    assert resolved.details["unheld_operations"] == [task.pk, email.pk]
    assert resolved.details["released_operations"] == [task.pk]
    assert operation_execute(operation_id=task.pk) == "succeeded"
    assert operation_execute(operation_id=email.pk) == "succeeded"
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 1)


def test_closing_the_case_cancels_the_steps_it_held(sandbox, admin_user):
    event = refused_enquiry(sandbox, "held-5")
    case = ReviewCase.objects.get(operation=op(event, "create_enquiry"))

    case_close(
        case_id=case.pk, actor=admin_user, resolution_code="spam_or_test", reason="test entry"
    )

    assert statuses(event) == {step: ("cancelled", None) for step in ("create_enquiry", *LATER)}
    closed = AuditEntry.objects.get(action="case_closed", case=case)
    assert sorted(closed.details["cancelled_operations"]) == sorted(
        event.operations.values_list("pk", flat=True)
    )
    assert event_status(list(event.operations.values_list("status", flat=True))) == "completed"
    assert sandbox.stats()["records"] == 0


def test_only_a_step_in_review_can_be_held(sandbox):
    event = ingest("held-6")
    enquiry, task = op(event, "create_enquiry"), op(event, "assign_task")
    with pytest.raises(IntegrityError), transaction.atomic():
        Operation.objects.filter(pk=task.pk).update(held_by=enquiry)  # still pending
