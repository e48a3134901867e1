"""`manage.py remap`: a corrected field map re-run over kept deliveries; an enquiry
already in the CRM is updated (its own operation, its own key), never created twice."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.sources import source_get_or_create, source_hook_configure
from idempotency_core.models import AuditEntry, Event, Operation, Source
from tests.factories import run_pipeline
from tests.support.senders import SAMPLES, signed_headers

pytestmark = pytest.mark.django_db


def gravity_source_with_a_wrong_map() -> tuple[Source, str]:
    """Message taken from field 3 (the phone) and email from the right field 2."""
    source, _ = source_get_or_create(name="gf-site")
    path = source_hook_configure(source=source, profile="gravityforms").path
    source.profile_overrides = {"field_map": {"message": ["3"]}}
    source.save(update_fields=["profile_overrides"])
    return source, path


def deliver(path: str) -> None:
    sample = SAMPLES["gravityforms"]
    headers = signed_headers(sample, "", f"http://testserver{path}")
    response = Client().post(path, sample.body, content_type=headers.pop("Content-Type"))
    assert response.status_code == 200, response.content


def remap(*args: str) -> str:
    out = StringIO()
    since = (timezone.now() - timedelta(days=1)).date().isoformat()
    call_command("remap", "--source", "gf-site", "--since", since, *args, stdout=out)
    return out.getvalue()


def test_a_corrected_map_updates_the_record_already_in_the_crm(sandbox):
    source, path = gravity_source_with_a_wrong_map()
    deliver(path)
    event = Event.objects.get(source=source)
    run_pipeline(event)
    record = sandbox.client.get(
        "/crm/records", params={"external_ref": event.operations.get(step="create_enquiry").key}
    ).json()["results"][0]
    assert record["message"] == "(555) 010-2030"  # the phone, mapped wrongly as the message

    source.profile_overrides = {}
    source.save(update_fields=["profile_overrides"])
    preview = remap("--dry-run")
    assert "would change message" in preview and "1 event(s) would change" in preview
    event.refresh_from_db()
    assert event.payload["message"] == "(555) 010-2030"  # a dry run changes nothing

    assert "1 event(s) changed" in remap()
    event.refresh_from_db()
    assert event.payload["message"] == "Could you quote for a new office network?"
    update = Operation.objects.get(event=event, step="remap_enquiry:1")
    assert operation_execute(operation_id=update.pk) == "succeeded"
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 1)
    updated = sandbox.client.get(f"/crm/records/{record['id']}").json()
    assert updated["message"] == "Could you quote for a new office network?"
    entry = AuditEntry.objects.get(action="remapped", event=event)
    assert entry.details["changed"] == ["message"]  # names, never the values

    assert "0 event(s) changed" in remap()  # nothing left to change
    # The provider's retry of the same delivery is still the same event.
    deliver(path)
    assert Event.objects.filter(source=source).count() == 1


def test_before_the_enquiry_exists_the_corrected_payload_is_simply_what_runs(sandbox):
    source, path = gravity_source_with_a_wrong_map()
    deliver(path)
    source.profile_overrides = {}
    source.save(update_fields=["profile_overrides"])
    assert "1 event(s) changed" in remap()
    event = Event.objects.get(source=source)
    assert not event.operations.filter(step__startswith="remap_enquiry").exists()
    run_pipeline(event)
    records = sandbox.client.get("/crm/records", params={"since": "2000-01-01T00:00:00Z"}).json()
    assert [r["message"] for r in records["results"]] == [
        "Could you quote for a new office network?"
    ]
