"""The export shows every place the erasure scrubs: a quote of the person in anyone's row
of each column `person erase` rewrites (QUOTING_COLUMNS) is in their `person export`,
and is gone after their erasure. A column added to that list and not planted here fails
the test."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.utils import timezone

from idempotency_core.audit.cases import review_case_open
from idempotency_core.models import (
    Attempt,
    Destination,
    DestinationBudget,
    Event,
    Operation,
    ReviewCase,
)
from idempotency_core.privacy.erasure import QUOTING_COLUMNS, person_erase
from idempotency_core.privacy.export import person_export
from review_console.models import BulkReplayItem, BulkReplayJob, CauseHold
from tests.factories import ingest, make_user, op, run_pipeline

pytestmark = pytest.mark.django_db

ADA = {"name": "Ada Quillfeather", "email": "ada.quill@example.org", "phone": "+44 20 7946 0123"}
BOB = {"name": "Bob Marchetti", "email": "bob.marchetti@example.net", "phone": "+1 415 555 0199"}


def quote(where: str) -> str:
    return f"{where} names {ADA['email']} here"


def plant(bob: Event) -> dict[str, str]:
    """A quote of Ada in one row of Bob's (or nobody's) per column: {column: quote}."""
    rita = make_user("rita")
    bob_op = op(bob, "create_enquiry")
    planted: dict[str, str] = {}

    def put(label: str, field: str) -> str:
        planted[f"{label}.{field}"] = quote(f"{label}.{field}")
        return planted[f"{label}.{field}"]

    case, _ = review_case_open(
        kind=ReviewCase.Kind.PERMANENT,
        subject=f"operation:{bob_op.pk}",
        summary=put("idempotency_core.ReviewCase", "summary"),
        event=bob,
        operation=bob_op,
        evidence={"note": put("idempotency_core.ReviewCase", "evidence")},
        system="test",
    )
    ReviewCase.objects.filter(pk=case.pk).update(
        resolution_note=put("idempotency_core.ReviewCase", "resolution_note")
    )
    Operation.objects.filter(pk=bob_op.pk).update(
        last_error=put("idempotency_core.Operation", "last_error"),
        arguments={"note": put("idempotency_core.Operation", "arguments")},
    )
    Attempt.objects.filter(operation=bob_op).update(
        error_message=put("idempotency_core.Attempt", "error_message")
    )
    DestinationBudget.objects.update_or_create(
        destination=Destination.objects.get(name="crm"),
        defaults={"pause_reason": put("idempotency_core.DestinationBudget", "pause_reason")},
    )
    job = BulkReplayJob.objects.create(
        created_by=rita,
        reason=put("review_console.BulkReplayJob", "reason"),
        filter_params={"note": put("review_console.BulkReplayJob", "filter_params")},
        filter_description=put("review_console.BulkReplayJob", "filter_description"),
    )
    BulkReplayItem.objects.create(
        job=job, operation=bob_op, message=put("review_console.BulkReplayItem", "message")
    )
    CauseHold.objects.create(
        kind="permanent_failure",
        step="create_enquiry",
        destination=Destination.objects.get(name="crm"),
        resolution_code="held",
        reason=put("review_console.CauseHold", "reason"),
        created_by=rita,
        until=timezone.now() + timedelta(hours=4),
    )
    LogEntry.objects.create(
        user=rita,
        content_type=ContentType.objects.get_for_model(Event),
        object_id=str(bob.pk),
        object_repr=put("admin.LogEntry", "object_repr"),
        action_flag=CHANGE,
        change_message=put("admin.LogEntry", "change_message"),
    )
    return planted


def test_every_quote_the_erasure_removes_is_in_the_export(sandbox: Any) -> None:
    ada = ingest("ada-1", contact=ADA, message="Ada's walnut kitchen")
    bob = ingest("bob-1", contact=BOB, message="Bob's garden shed")
    run_pipeline(bob)
    planted = plant(bob)
    columns = {f"{label}.{field}" for label, fields in QUOTING_COLUMNS for field in fields}
    assert set(planted) == columns  # a new column needs a row planted here
    own_arguments = quote("Ada's own operation arguments")
    Operation.objects.filter(pk=op(ada, "create_enquiry").pk).update(
        arguments={"note": own_arguments}
    )

    document = person_export(address=ADA["email"], system="test")
    assert document is not None
    exported = json.dumps(document, default=str)
    for column, text in {**planted, "own arguments": own_arguments}.items():
        assert text in exported, f"{column} quotes the person but is not exported"
    # Bob's rows are there for what quotes Ada, not as his submission.
    assert [s["key"] for s in document["submissions"]] == ["ada-1"]
    assert "bob's garden shed" not in exported.lower()

    person_erase(address=ADA["email"], reason="asked", system="test")
    again = json.dumps(
        {
            label: list(apps.get_model(label).objects.values(*fields))
            for label, fields in QUOTING_COLUMNS
        },
        default=str,
    )
    assert ADA["email"] not in again
