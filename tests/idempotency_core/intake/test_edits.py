"""Edits (docs/senders.md): a changed submission under a new key that `revises`
the original updates its enquiry; it never creates a second one."""

from __future__ import annotations

import pytest
from django.utils import timezone

from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import Delivery, Event, Operation
from tests.factories import post, run_pipeline, submission

pytestmark = pytest.mark.django_db


def test_an_edit_updates_the_original_enquiry_and_creates_nothing(api, sandbox):
    assert post(api, submission(), key="original").status_code == 202
    original = Event.objects.get(key="original")
    run_pipeline(original)

    edited = submission(message="Actually, a bathroom refit.", revises="original")
    response = post(api, edited, key="original-edit-1")
    assert response.status_code == 202
    edit = Event.objects.get(key="original-edit-1")
    assert edit.revises == original
    assert list(edit.operations.values_list("step", flat=True)) == ["update_enquiry"]
    assert operation_execute(operation_id=edit.operations.get().pk) == "succeeded"

    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 1)
    record_id = original.operations.get(step="create_enquiry").destination_ref
    record = sandbox.client.get(f"/crm/records/{record_id}").json()
    assert record["message"] == "Actually, a bathroom refit."
    assert edit.operations.get().destination_ref == record_id
    # The edit's own repeat is recognised like any other.
    assert post(api, edited, key="original-edit-1").status_code == 200


def test_an_edit_waits_for_the_enquiry_it_revises(api, sandbox):
    post(api, submission(), key="slow-original")
    post(api, submission(message="Changed", revises="slow-original"), key="slow-edit")
    update = Event.objects.get(key="slow-edit").operations.get()
    assert operation_execute(operation_id=update.pk) == "retryable"
    run_pipeline(Event.objects.get(key="slow-original"))
    Operation.objects.filter(pk=update.pk).update(next_attempt_at=timezone.now())
    assert operation_execute(operation_id=update.pk) == "succeeded"
    assert sandbox.stats()["records"] == 1


@pytest.mark.parametrize(
    ("revises", "contact", "message"),
    [
        ("never-sent", None, "No earlier submission"),
        ("first", {"name": "Eve", "email": "eve@example.com"}, "contact of the submission"),
        ("edit-key", None, "cannot revise itself"),
    ],
)
def test_an_edit_of_something_it_cannot_revise_is_refused(api, revises, contact, message):
    post(api, submission(), key="first")
    body = submission(message="x", revises=revises)
    if contact:
        body["contact"] = contact
    response = post(api, body, key="edit-key")
    assert response.status_code == 400
    assert message in response.json()["errors"]["revises"][0]
    assert Event.objects.count() == 1
    assert Delivery.objects.filter(outcome="invalid", event=None).count() == 1


def test_an_edit_that_cannot_revise_under_a_known_key_is_answered_as_that_keys_repeat(api):
    """A known key is a repeat whatever the payload says: a different payload under it
    is refused as a reused key (422, recorded), not judged as an edit."""
    post(api, submission(), key="first")
    response = post(api, submission(message="x", revises="first"), key="first")
    assert response.status_code == 422
    assert Event.objects.count() == 1
    assert Delivery.objects.filter(outcome="key_reused").count() == 1
