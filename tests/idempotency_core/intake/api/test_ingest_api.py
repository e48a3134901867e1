"""The ingest API's contract, code by code (docs/senders.md, "The ingest API")."""

from __future__ import annotations

import json
import re
import uuid
from types import SimpleNamespace

import pytest
from django.core.cache import cache
from django.test import override_settings
from django.urls import set_script_prefix
from rest_framework.test import APIClient

from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.api.serializers import ContactSerializer, SubmissionSerializer
from idempotency_core.intake.api.throttling import SourceRateThrottle
from idempotency_core.intake.ingest import suspected_duplicate_flag
from idempotency_core.intake.sources import source_api_key_issue
from idempotency_core.models import Delivery, Event, Operation, ReviewCase, Source
from tests.factories import URL, post, submission


def assert_nothing_stored() -> None:
    assert Event.objects.count() == 0
    assert Operation.objects.count() == 0


pytestmark = pytest.mark.django_db


def test_first_receipt_is_accepted_with_location(api):
    response = post(api, submission())
    assert response.status_code == 202
    data = response.json()
    assert data["status"] == "received"
    event = Event.objects.get()
    assert data["event_id"] == str(event.pk)
    assert response["Location"] == data["status_url"]
    assert data["status_url"].endswith(f"/api/v1/submissions/{event.pk}/")
    assert list(event.operations.order_by("position").values_list("step", flat=True)) == [
        "create_enquiry",
        "assign_task",
        "send_confirmation",
    ]
    delivery = Delivery.objects.get()
    assert (delivery.outcome, delivery.status_code, delivery.payload_matched) == (
        "accepted",
        202,
        True,
    )


def test_repeat_is_answered_from_the_stored_event(api):
    first = post(api, submission()).json()
    # Same content, keys in another order and spacing: same canonical fingerprint.
    reordered = json.dumps(dict(reversed(list(submission().items()))), indent=2)
    response = post(api, reordered)
    assert response.status_code == 200
    assert response["Idempotent-Replayed"] == "true"
    assert response.json()["event_id"] == first["event_id"]
    assert response.json()["status"] == "processing"
    assert Event.objects.count() == 1
    assert Operation.objects.count() == 3
    assert list(Delivery.objects.order_by("id").values_list("outcome", flat=True)) == [
        "accepted",
        "replayed",
    ]


def test_same_key_with_a_different_payload_is_refused_and_recorded(api):
    first = post(api, submission()).json()
    response = post(api, submission(message="Changed my mind"))
    assert response.status_code == 422
    assert response.json()["code"] == "idempotency_key_reused"
    assert Event.objects.get().payload["message"] == "Please quote for a kitchen refit."
    refused = Delivery.objects.get(outcome="key_reused")
    assert str(refused.event_id) == first["event_id"]
    assert refused.payload_matched is False
    assert refused.status_code == 422


def test_submission_id_names_the_event_when_there_is_no_header(api):
    body = submission(submission_id="form-123")
    assert post(api, body, key=None).status_code == 202
    assert post(api, body, key=None).status_code == 200
    assert Event.objects.get().key == "form-123"


def test_the_header_wins_over_submission_id(api):
    post(api, submission(submission_id="form-123"), key="header-key")
    assert Event.objects.get().key == "header-key"


def test_two_keys_from_the_same_person_are_two_events(api):
    assert post(api, submission(), key="a").status_code == 202
    assert post(api, submission(), key="b").status_code == 202
    assert Event.objects.count() == 2
    digests = set(Event.objects.values_list("contact_digest", flat=True))
    assert len(digests) == 1 and "" not in digests
    # Same person, same message, new key: both kept, and a person is asked, by the
    # first step's task (ingest.suspected_duplicate_flag), not by the answer.
    assert not ReviewCase.objects.exists()
    for operation in Operation.objects.filter(position=0).order_by("event__received_at"):
        suspected_duplicate_flag(operation_id=operation.pk)
    case = ReviewCase.objects.get(kind="suspected_duplicate")
    first, second = Event.objects.order_by("received_at")
    assert case.subject == f"events:{first.pk}:{second.pk}"
    assert case.event == second
    assert case.evidence["event_ids"] == [str(first.pk), str(second.pk)]


def test_a_different_message_from_the_same_person_is_not_suspected(api):
    post(api, submission(message="Kitchen"), key="a")
    post(api, submission(message="Bathroom"), key="b")
    assert Event.objects.count() == 2
    for operation in Operation.objects.filter(position=0):
        assert suspected_duplicate_flag(operation_id=operation.pk) is None
    assert not ReviewCase.objects.exists()


def test_missing_key_is_refused(api):
    response = post(api, submission(), key=None)
    assert response.status_code == 400
    assert response.json()["code"] == "idempotency_key_missing"
    assert_nothing_stored()
    assert Delivery.objects.get().outcome == "key_missing"


@pytest.mark.parametrize("key", ["", " ", "a b", "é", "x" * 256, "tab\there"])
def test_malformed_key_is_refused(api, key):
    response = post(api, submission(), key=key)
    assert response.status_code == 400
    assert response.json()["code"] in {"idempotency_key_missing", "idempotency_key_invalid"}
    assert_nothing_stored()


def test_a_key_of_255_visible_characters_is_accepted(api):
    assert post(api, submission(), key="~" * 255).status_code == 202


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"contact": {"name": "Ada", "email": "ada@example.com"}}, "form"),
        ({"form": "contact"}, "contact"),
        ({"form": "contact", "contact": {"name": "Ada", "email": "not-an-email"}}, "contact"),
        ({"form": ["a"], "contact": {"name": "Ada", "email": "ada@example.com"}}, "form"),
        ({"form": "c", "contact": "Ada", "message": "x"}, "contact"),
        (
            {"form": "c", "contact": {"name": "A", "email": "a@example.com"}, "fields": [1]},
            "fields",
        ),
        (
            {"form": "c", "contact": {"name": "A", "email": "a@b.co"}, "submitted_at": "yesterday"},
            "submitted_at",
        ),
    ],
)
def test_invalid_fields_are_named(api, body, field):
    response = post(api, body)
    assert response.status_code == 400
    data = response.json()
    assert data["code"] == "invalid"
    assert field in data["errors"]
    assert_nothing_stored()
    delivery = Delivery.objects.get()
    assert (delivery.outcome, delivery.fingerprint, delivery.event_id) == ("invalid", "", None)


@pytest.mark.parametrize("raw", ["{not json", "[1, 2]", '"text"', "", "\xff"])
def test_malformed_json_is_refused(api, raw):
    response = post(api, raw.encode("latin-1"))
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_json"
    assert_nothing_stored()


def test_wrong_content_type_is_refused(api):
    response = api.post(
        URL,
        data="form=contact",
        content_type="application/x-www-form-urlencoded",
        HTTP_IDEMPOTENCY_KEY="k",
    )
    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"
    assert_nothing_stored()
    assert Delivery.objects.get().outcome == "unsupported_media"


def test_body_over_the_limit_is_refused(api):
    response = post(api, submission(message="x" * (64 * 1024)))
    assert response.status_code == 413
    assert response.json()["code"] == "body_too_large"
    assert_nothing_stored()


@override_settings(ONEFOLD_MAX_BODY_BYTES=2048)
def test_the_body_limit_is_configurable(api):
    assert post(api, submission(message="x" * 2100)).status_code == 413
    assert post(api, submission(message="x" * 100)).status_code == 202


def test_missing_or_wrong_api_key_is_401(api):
    anonymous = APIClient()
    assert post(anonymous, submission()).status_code == 401
    anonymous.credentials(HTTP_AUTHORIZATION="Api-Key ofk_wrong")
    assert post(anonymous, submission()).status_code == 401
    anonymous.credentials(HTTP_AUTHORIZATION="Bearer something")
    assert post(anonymous, submission()).status_code == 401
    assert_nothing_stored()
    assert Delivery.objects.count() == 0


def test_disabled_source_is_403(api, source):
    Source.objects.filter(pk=source.pk).update(is_active=False)
    assert post(api, submission()).status_code == 403
    assert_nothing_stored()


def test_revoked_key_is_401(source):
    key = source_api_key_issue(source=source)
    source.api_keys.update(revoked_at="2026-01-01T00:00:00Z")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    assert post(client, submission()).status_code == 401


def test_api_keys_are_stored_hashed(source_and_key):
    source, key = source_and_key
    stored = source.api_keys.get()
    assert key not in (stored.digest, stored.prefix)
    assert len(stored.digest) == 64


def test_over_the_rate_is_429_with_retry_after(api, source, monkeypatch):
    # Counts live in the cache, keyed by source id: earlier tests may have left some.
    cache.clear()
    clock = SimpleNamespace(now=1_800_000_015.0)  # 15 s into a one-minute window
    monkeypatch.setattr(SourceRateThrottle, "clock", staticmethod(lambda: clock.now))
    Source.objects.filter(pk=source.pk).update(rate_per_minute=3)
    codes = [post(api, submission(), key=f"r{i}").status_code for i in range(5)]
    assert codes == [202, 202, 202, 429, 429]
    response = post(api, submission(), key="r9")
    assert response.json()["code"] == "throttled"
    assert response["Retry-After"] == "45"  # when this window ends
    clock.now += 45  # the next window: admitted again
    assert post(api, submission(), key="r10").status_code == 202


def test_status_endpoint_reports_operations(api):
    event_id = post(api, submission()).json()["event_id"]
    data = api.get(f"{URL}{event_id}/").json()
    assert data["event_id"] == event_id
    assert data["status"] == "processing"
    assert [op["step"] for op in data["operations"]] == [
        "create_enquiry",
        "assign_task",
        "send_confirmation",
    ]
    assert {op["status"] for op in data["operations"]} == {"pending"}
    assert {op["attempts"] for op in data["operations"]} == {0}


def test_status_endpoint_reports_references_and_the_event_status(api, sandbox):
    event_id = post(api, submission()).json()["event_id"]
    for operation in Operation.objects.filter(event_id=event_id).order_by("position"):
        assert operation_execute(operation_id=operation.pk) == "succeeded"
    data = api.get(f"{URL}{event_id}/").json()
    assert data["status"] == "completed"
    stats = sandbox.stats()
    by_step = {op["step"]: op for op in data["operations"]}
    assert set(by_step) == {"create_enquiry", "assign_task", "send_confirmation"}
    assert {op["status"] for op in data["operations"]} == {"succeeded"}
    assert {op["attempts"] for op in data["operations"]} == {1}
    # The references the sender can quote to the CRM's staff: the record, its task, the email.
    assert by_step["create_enquiry"]["destination_ref"].startswith("rec_")
    assert by_step["assign_task"]["destination_ref"].startswith("task_")
    assert by_step["send_confirmation"]["destination_ref"] in stats["messages_by_message_id"]

    Operation.objects.filter(event_id=event_id, step="send_confirmation").update(
        status="needs_review"
    )
    assert api.get(f"{URL}{event_id}/").json()["status"] == "needs_review"


def test_status_endpoint_is_scoped_to_the_source(api):
    event_id = post(api, submission()).json()["event_id"]
    other_source = Source.objects.create(name="other", key_salt="x" * 64)
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Api-Key {source_api_key_issue(source=other_source)}")
    assert other.get(f"{URL}{event_id}/").status_code == 404
    assert api.get(f"{URL}{uuid.uuid4()}/").status_code == 404


def test_keys_are_scoped_per_source(api):
    post(api, submission(), key="shared")
    other_source = Source.objects.create(name="other", key_salt="y" * 64)
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Api-Key {source_api_key_issue(source=other_source)}")
    assert post(other, submission(), key="shared").status_code == 202
    keys = set(Operation.objects.values_list("key", flat=True))
    assert len(keys) == 6


def test_operation_keys_are_opaque(api):
    # Only hex digits after the prefix: no fragment of the client's key or the
    # contact can survive. (Checking for "ada" was flaky: it is valid hex.)
    post(api, submission(), key="ada-submission")
    keys = list(Operation.objects.values_list("key", flat=True))
    assert len(keys) == 3
    for key in keys:
        assert re.fullmatch(r"opk_[0-9a-f]{48}", key), key


def test_openapi_schema_is_served(client):
    response = client.get("/api/schema/")
    assert response.status_code == 200
    text = response.content.decode()
    assert "/api/v1/submissions/" in text
    assert "Idempotency-Key" in text


def test_the_status_url_is_the_detail_routes_under_each_script_prefix(api):
    """The status path is built from one `reverse` per script prefix: it is the detail
    route's, under whichever prefix the site is served (which Django's WSGI handler
    sets from SCRIPT_NAME or FORCE_SCRIPT_NAME for each request; the test client does
    not), each event its own."""
    answers = {}
    try:
        for n, prefix in enumerate(("/", "/onefold/", "/")):
            set_script_prefix(prefix)
            answers[n] = (prefix, post(api, submission(), key=f"prefix-{n}").json())
    finally:
        set_script_prefix("/")
    for prefix, data in answers.values():
        expected = f"http://testserver{prefix}api/v1/submissions/{data['event_id']}/"
        assert data["status_url"] == expected


def test_each_submission_serializer_binds_copies_of_the_declared_fields():
    """KnownKeysSerializer.get_fields copies shallowly where DRF deep-copies: each
    instance still has fields of its own, bound to it, nested ones included, and the
    declared fields stay unbound and unchanged."""
    first = SubmissionSerializer(data=submission(contact={"name": "", "email": "x"}))
    second = SubmissionSerializer(data=submission())
    assert not first.is_valid()
    assert second.is_valid(), second.errors
    assert set(first.errors["contact"]) == {"name", "email"}
    for name in ("form", "contact"):
        assert first.fields[name] is not second.fields[name]
        assert first.fields[name].parent is first
    email = first.fields["contact"].fields["email"]
    assert email is not second.fields["contact"].fields["email"]
    assert email.parent is first.fields["contact"] and email.root is first
    declared = SubmissionSerializer._declared_fields
    assert declared["form"].field_name is None and "fields" not in declared["contact"].__dict__
    assert ContactSerializer._declared_fields["email"].field_name is None


@pytest.mark.parametrize(
    "fields",
    [
        {"note": "half of a pair \udc00"},
        {"note": ["\ud800"]},
        {"n\udfffote": "x"},
        {"note": {"deeper": "x\ud83d"}},
    ],
)
def test_an_unpaired_surrogate_in_the_extra_fields_is_refused(fields):
    # A hook's form or multipart body reaches the serializer without the strict JSON
    # reader before it: the serializer's own rule must hold.
    serializer = SubmissionSerializer(data=submission(fields=fields))
    assert not serializer.is_valid()
    assert "Surrogate characters are not allowed." in str(serializer.errors["fields"])
    assert SubmissionSerializer(data=submission(fields={"note": "a pair \U0001f600"})).is_valid()
