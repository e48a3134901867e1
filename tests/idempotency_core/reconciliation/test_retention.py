"""Retention: payloads purged with keys kept; a very late repeat never duplicates."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.ingest import (
    LATE_REPEAT_TASK,
    KeyReusedError,
    RawDelivery,
    Unreadable,
    event_ingest,
    event_ingest_unreadable,
)
from idempotency_core.intake.sources import source_create_with_key
from idempotency_core.models import AuditEntry, Delivery, Event, ReviewCase
from idempotency_core.reconciliation.retention import payloads_purge
from tests.factories import completed, submission
from tests.support.processes import free_port
from tests.support.queue import queued, run_queued


def age(event: Event, days: int) -> None:
    Event.objects.filter(pk=event.pk).update(received_at=timezone.now() - timedelta(days=days))


@pytest.mark.django_db
def test_purge_nulls_old_payloads_and_keeps_key_and_fingerprint(sandbox, settings):
    settings.ONEFOLD_PAYLOAD_RETENTION_DAYS = 30
    old, recent = completed("old"), completed("recent")
    in_flight = event_ingest(source=old.source, key="in-flight", payload=submission()).event
    sandbox.fault("create_record", "http_400")
    in_review = event_ingest(
        source=old.source, key="in-review", payload=submission(message="refused")
    ).event
    assert operation_execute(operation_id=in_review.operations.get(position=0).pk) == "permanent"
    for event in (old, in_flight, in_review):
        age(event, 31)
    fingerprint = Event.objects.get(pk=old.pk).fingerprint

    dry = StringIO()
    call_command("purge_payloads", "--dry-run", stdout=dry, stderr=StringIO())
    assert "would purge 1 payloads" in dry.getvalue()
    assert Event.objects.get(pk=old.pk).payload is not None

    report = payloads_purge(batch_size=1)
    assert (report.candidates, report.purged) == (1, 1)
    old.refresh_from_db()
    assert old.payload is None and old.payload_purged_at is not None
    assert (old.key, old.fingerprint) == ("old", fingerprint)
    assert Event.objects.get(pk=recent.pk).payload is not None
    # An operation still in flight keeps the payload it needs; so does one in review
    # (with the steps it holds): a replay or a verified reference needs it.
    assert Event.objects.get(pk=in_flight.pk).payload is not None
    assert Event.objects.get(pk=in_review.pk).payload is not None
    assert AuditEntry.objects.filter(action="payloads_purged").count() == 1
    assert payloads_purge().purged == 0

    # A repeat inside key retention is still recognised by its fingerprint.
    assert event_ingest(source=old.source, key="old", payload=submission()).created is False
    with pytest.raises(KeyReusedError):
        event_ingest(source=old.source, key="old", payload=submission(message="changed"))


@pytest.mark.django_db
def test_a_late_repeat_of_an_expired_key_opens_a_late_replay_case_not_a_duplicate(
    sandbox, settings
):
    settings.ONEFOLD_KEY_RETENTION_DAYS = 400
    event = completed("ancient")
    age(event, 401)
    payloads_purge()
    assert sandbox.stats()["records"] == 1

    lookups = sandbox.stats()["calls"]["lookup_record"]
    result = event_ingest(source=event.source, key="ancient", payload=submission())
    assert (result.created, result.event.pk) == (False, event.pk)
    # Answered from the stored event: the destination is asked later, by a worker.
    assert sandbox.stats()["calls"]["lookup_record"] == lookups
    assert not ReviewCase.objects.filter(kind="late_replay").exists()
    assert len(queued(LATE_REPEAT_TASK)) == 1
    run_queued(LATE_REPEAT_TASK)
    case = ReviewCase.objects.get(kind="late_replay")
    enquiry = event.operations.get(step="create_enquiry")
    assert case.subject == f"event:{event.pk}"
    assert case.event_id == event.pk and case.operation_id == enquiry.pk
    assert case.evidence["record_id"] == enquiry.destination_ref
    assert case.evidence["external_ref"] == enquiry.key
    assert case.evidence["fingerprint_matched"] is True
    # Nothing was created: one record, one event, the delivery recorded.
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 1)
    assert Event.objects.count() == 1
    assert Delivery.objects.filter(event=event, outcome="replayed").count() == 1

    # A second late repeat finds the case open: still one case.
    event_ingest(source=event.source, key="ancient", payload=submission())
    run_queued(LATE_REPEAT_TASK)
    assert ReviewCase.objects.filter(kind="late_replay").count() == 1


@pytest.mark.django_db
def test_an_expired_key_without_a_record_is_audited_without_a_case(sandbox, settings):
    event = completed("gone")
    sandbox.client.delete(
        f"/crm/records/{event.operations.get(step='create_enquiry').destination_ref}"
    ).raise_for_status()
    age(event, settings.ONEFOLD_KEY_RETENTION_DAYS + 1)
    event_ingest(source=event.source, key="gone", payload=submission())
    run_queued(LATE_REPEAT_TASK)
    assert not ReviewCase.objects.filter(kind="late_replay").exists()
    assert AuditEntry.objects.filter(action="late_replay_checked", event=event).count() == 1
    assert sandbox.stats()["records"] == 0


@pytest.mark.django_db
def test_a_repeat_inside_key_retention_never_calls_the_destination(sandbox):
    event = completed("fresh")
    calls = sandbox.stats()["calls"]["lookup_record"]
    event_ingest(source=event.source, key="fresh", payload=submission())
    assert not queued(LATE_REPEAT_TASK)
    assert sandbox.stats()["calls"]["lookup_record"] == calls
    assert not ReviewCase.objects.filter(kind="late_replay").exists()


@pytest.mark.django_db
def test_a_late_repeat_over_http_is_answered_from_the_stored_event(sandbox, settings):
    _, _, api_key = source_create_with_key(name="late-site")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {api_key}")

    def send():
        return client.post(
            "/api/v1/submissions/", submission(), format="json", HTTP_IDEMPOTENCY_KEY="late-http"
        )

    first = send()
    assert first.status_code == 202
    event = Event.objects.get(pk=first.json()["event_id"])
    for operation in event.operations.order_by("position"):
        assert operation_execute(operation_id=operation.pk) == "succeeded"
    age(event, settings.ONEFOLD_KEY_RETENTION_DAYS + 1)

    lookups = sandbox.stats()["calls"]["lookup_record"]
    late = send()
    assert late.status_code == 200 and late["Idempotent-Replayed"] == "true"
    assert late.json()["event_id"] == str(event.pk)
    # Nothing on the request path called the CRM; the check is queued work.
    assert sandbox.stats()["calls"]["lookup_record"] == lookups
    run_queued(LATE_REPEAT_TASK)
    assert ReviewCase.objects.filter(kind="late_replay", event=event).count() == 1
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 1)


@pytest.mark.django_db
def test_a_late_repeat_whose_lookup_fails_opens_a_case_and_creates_nothing(sandbox, settings):
    event = completed("unreachable")
    age(event, settings.ONEFOLD_KEY_RETENTION_DAYS + 1)
    settings.DESTINATION_URL = f"http://127.0.0.1:{free_port()}"  # the CRM is down
    result = event_ingest(source=event.source, key="unreachable", payload=submission())
    assert (result.created, result.event.pk) == (False, event.pk)
    run_queued(LATE_REPEAT_TASK)
    case = ReviewCase.objects.get(kind="late_replay")
    assert case.evidence["record_id"] is None and case.evidence["lookup_error"]
    assert "check the CRM by hand" in case.summary
    assert sandbox.stats()["records"] == 1


@pytest.mark.django_db
def test_an_unreadable_delivery_waiting_for_its_map_keeps_its_payload_and_raw_body(settings):
    """Its kept body is all there is to fix it with; once its case is settled, it goes."""
    settings.ONEFOLD_PAYLOAD_RETENTION_DAYS = 30
    source, _, _ = source_create_with_key(name="forms")
    event = event_ingest_unreadable(
        source=source,
        key="unreadable-1",
        payload={"form": "contact", "contact": {}},
        raw=RawDelivery(body=b"{}", content_type="application/json", verification="token"),
        unreadable=Unreadable(missing=["contact: nothing"], profile="cf7", field_map={}),
    ).event
    age(event, 31)
    assert payloads_purge().purged == 0
    ReviewCase.objects.filter(event=event).update(status="closed", resolution_code="spam_or_test")
    assert payloads_purge().purged == 1
    assert Event.objects.get(pk=event.pk).payload is None
    assert Delivery.objects.get(event=event).raw_body is None
