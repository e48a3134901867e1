"""Builders shared by the test modules: submissions, events made the real way, users, cases.

Test modules import these from here, never from one another or from a conftest
(tests/test_architecture.py checks it). Everything is built through the product's
own services (event_ingest, operation_execute, review_case_open), never from
hand-written rows, so the tests run on the states production produces.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import Group, User
from django.http import HttpResponse
from django.utils import timezone
from rest_framework.test import APIClient

from idempotency_core.audit.cases import review_case_open
from idempotency_core.audit.subjects import operation_subject
from idempotency_core.configuration.versions import ApplyResult, config_apply
from idempotency_core.execution.engine import operation_execute
from idempotency_core.execution.outcomes import operation_hold_later
from idempotency_core.intake.ingest import event_ingest
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import Event, Operation, ReviewCase
from idempotency_core.tasks import operation_run
from tests.support.processes import Sandbox

# -- submissions and the ingest API ------------------------------------------------

URL = "/api/v1/submissions/"


def submission(**overrides: Any) -> dict[str, Any]:
    """A valid contact-form payload (docs/senders.md); `overrides` replace
    top-level fields whole (`contact={...}` replaces the entire contact)."""
    body: dict[str, Any] = {
        "form": "contact",
        "submitted_at": "2026-11-29T10:15:00Z",
        "contact": {
            "name": "Ada Lovelace",
            "email": "ada@example.com",
            "phone": "+44 20 7946 0000",
        },
        "message": "Please quote for a kitchen refit.",
        "fields": {"budget": "10k"},
    }
    body.update(overrides)
    return body


def post(
    client: APIClient, body: dict[str, Any] | str | bytes, *, key: str | None = "k-1", **extra: Any
) -> HttpResponse:
    """POST `body` to the ingest API with `key` as Idempotency-Key (none when `key` is None).

    A dict is sent as JSON; a str or bytes is sent as it is (for malformed bodies)."""
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {}
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return client.post(URL, data=data, content_type="application/json", **headers, **extra)


# -- events through the services (no HTTP) -----------------------------------------


def ingest(key: str, *, contact_from_key: bool = False, **overrides: Any) -> Event:
    """Ingest `submission(**overrides)` under `key` from the "website" source.

    With `contact_from_key=True` the contact is "Kim" at `<key>@example.com`, a person
    of their own, so that many events ingested together are not flagged as suspected
    duplicates of one another.
    """
    if contact_from_key:
        overrides = {"contact": {"name": "Kim", "email": f"{key}@example.com"}, **overrides}
    source, _ = source_get_or_create(name="website")
    return event_ingest(source=source, key=key, payload=submission(**overrides)).event


def op(event: Event, step: str) -> Operation:
    """The event's operation for `step` (e.g. "create_enquiry"), fresh from the database."""
    return event.operations.get(step=step)


def run_pipeline(event: Event) -> None:
    """Execute every step of `event` in order, asserting each one succeeds."""
    for operation in event.operations.order_by("position"):
        assert operation_execute(operation_id=operation.pk) == "succeeded"


def completed(key: str, **overrides: Any) -> Event:
    """An event ingested (as `ingest`) and run to the end: one record, task and email."""
    event = ingest(key, **overrides)
    run_pipeline(event)
    return event


def configured(forms: dict[str, Any], *, source: str = "website") -> ApplyResult:
    """Applies `forms` (form name or "*" -> sections) as `source`'s business
    configuration, through the service the command and the console use; the source is
    made when missing."""
    source_get_or_create(name=source)
    return config_apply(document={"sources": {source: {"forms": forms}}}, reason="a test")


# -- console users and review cases ------------------------------------------------

PASSWORD = "correct-horse-battery"
ROLES = ("anonymous", "nonstaff", "reviewer", "replay_admin", "superuser")


def make_user(username: str, *, groups: tuple[str, ...] = (), staff: bool = True) -> User:
    """A user with `PASSWORD`, in the named groups (seeded by migrations)."""
    user = User.objects.create_user(username, password=PASSWORD, is_staff=staff)
    for name in groups:
        user.groups.add(Group.objects.get(name=name))
    return user


def crm_without_recognition(sandbox: Sandbox) -> None:
    """The sandbox CRM offers nothing that recognises a repeat: an unclear create goes
    to review (its capabilities are what it reports, read when recovery is decided)."""
    sandbox.capabilities(idempotency_keys=False, unique_external_ref=False, lookup=False)


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
        subject=operation_subject(operation.pk),
        summary="create_enquiry was refused: HTTP 400.",
        operation=operation,
        evidence={"http_status": 400, "held_operations": [{"id": i, "step": s} for i, s in held]},
        system="test",
    )
    return case


def duplicate_case(
    sandbox: Sandbox, *, key_a: str = "dup-a", key_b: str = "dup-b", evidence: str = "events"
) -> ReviewCase:
    """Two submissions of one person made two CRM records; a case names them.

    `sandbox` is the fixture: the records are really created there. With
    evidence="events" the case is the one ingest opens itself (it names the two
    events); with "records" the two messages differ, ingest stays quiet, and the
    case names the CRM records directly, as reconciliation would.
    """
    crm_ids = []
    for n, key in enumerate((key_a, key_b)):
        message = "Same message twice" if evidence == "events" else f"Message {n}"
        event = ingest(key, message=message)
        operation = event.operations.get(step="create_enquiry")
        # As a worker runs it: the task also opens the suspected-duplicate case.
        assert operation_run(operation.pk) == "succeeded"
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
    """The merge operation a suspected-duplicate case queued."""
    return Operation.objects.get(arguments__case_id=case.pk)
