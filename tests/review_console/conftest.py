"""Fixtures of the console tests: one user per role, and cases made the real way.

Cases come from the engine itself (event_ingest, operation_execute against the
sandbox) or from `review_case_open`, never from hand-written rows, so the
console is tested on the states production produces.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import Group, User
from django.utils import timezone

from idempotency_core.audit.cases import operation_subject, review_case_open
from idempotency_core.execution.engine import operation_execute, operation_hold_later
from idempotency_core.intake.ingest import event_ingest
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import Destination, Event, Operation, ReviewCase
from tests.core.test_ingest_api import submission

PASSWORD = "correct-horse-battery"
ROLES = ("anonymous", "nonstaff", "reviewer", "replay_admin", "superuser")


def make_user(username: str, *, groups: tuple[str, ...] = (), staff: bool = True) -> User:
    user = User.objects.create_user(username, password=PASSWORD, is_staff=staff)
    for name in groups:
        user.groups.add(Group.objects.get(name=name))
    return user


@pytest.fixture
def users(db: None) -> dict[str, User | None]:
    """One user per role. The non-staff user is even in Reviewers: staff is what counts."""
    return {
        "anonymous": None,
        "nonstaff": make_user("nora", groups=("Reviewers",), staff=False),
        "reviewer": make_user("rita", groups=("Reviewers",)),
        "replay_admin": make_user("rex", groups=("Replay admins",)),
        "superuser": User.objects.create_superuser("sue", password=PASSWORD),
    }


def ingest(key: str, **overrides) -> Event:
    source, _ = source_get_or_create(name="website")
    return event_ingest(source=source, key=key, payload=submission(**overrides)).event


def crm_without_recognition() -> None:
    """The CRM declares nothing that recognises a repeat: an unclear create goes to review."""
    Destination.objects.filter(name="crm").update(
        idempotency_keys=False, unique_external_ref=False, lookup=False
    )


@pytest.fixture
def ambiguous_case(sandbox) -> Callable[..., ReviewCase]:
    """Makes an ambiguous-outcome case for real: the first create fails in `mode`."""

    def make(key: str = "amb-1", mode: str = "drop_response_after_commit") -> ReviewCase:
        sandbox.capabilities(idempotency_keys=False, unique_external_ref=False, lookup=False)
        crm_without_recognition()
        sandbox.fault("create_record", mode)
        event = ingest(key, message=f"Please call me back ({key}).")
        operation = event.operations.get(step="create_enquiry")
        assert operation_execute(operation_id=operation.pk) == "ambiguous"
        operation.refresh_from_db()
        assert operation.status == Operation.Status.NEEDS_REVIEW
        return ReviewCase.objects.get(operation=operation, kind=ReviewCase.Kind.AMBIGUOUS)

    return make


def permanent_case(key: str = "perm-1") -> ReviewCase:
    """A case without any network call: an operation marked failed through the service.

    Each has its own message, so ingest does not flag them as duplicates of each other.
    """
    event = ingest(key, message=f"Please quote for a kitchen refit ({key}).")
    operation = event.operations.get(step="create_enquiry")
    Operation.objects.filter(pk=operation.pk).update(status=Operation.Status.NEEDS_REVIEW)
    held = operation_hold_later(operation, now=timezone.now())  # as the engine does
    case, _ = review_case_open(
        kind=ReviewCase.Kind.PERMANENT,
        subject=operation_subject(operation),
        summary="create_enquiry was refused: HTTP 400.",
        operation=operation,
        evidence={"http_status": 400, "held_operations": [{"id": i, "step": s} for i, s in held]},
        system="test",
    )
    return case


def duplicate_case(
    sandbox, *, key_a: str = "dup-a", key_b: str = "dup-b", evidence: str = "events"
) -> ReviewCase:
    """Two submissions of one person made two CRM records; a case names them.

    With evidence="events" the case is the one ingest opens itself (it names the
    two events); with "records" the two messages differ, ingest stays quiet, and
    the case names the CRM records directly, as reconciliation would.
    """
    crm_ids = []
    for n, key in enumerate((key_a, key_b)):
        message = "Same message twice" if evidence == "events" else f"Message {n}"
        event = ingest(key, message=message)
        operation = event.operations.get(step="create_enquiry")
        assert operation_execute(operation_id=operation.pk) == "succeeded"
        operation.refresh_from_db()
        crm_ids.append(operation.destination_ref)
    if evidence == "events":
        case = ReviewCase.objects.get(kind=ReviewCase.Kind.SUSPECTED_DUPLICATE, event__key=key_b)
        case.record_ids = crm_ids
        return case
    case, _ = review_case_open(
        kind=ReviewCase.Kind.SUSPECTED_DUPLICATE,
        subject=f"records:{crm_ids[0]}+{crm_ids[1]}",
        summary="Two enquiries from the same contact within minutes.",
        event=Event.objects.get(key=key_b),
        evidence={"external_ref": "", "record_ids": crm_ids},
        system="test",
    )
    case.record_ids = crm_ids
    return case


def merge_operation(case: ReviewCase) -> Operation:
    return Operation.objects.get(arguments__case_id=case.pk)
