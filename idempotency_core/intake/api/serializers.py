"""Input and output shapes of the ingest API (explicit fields only)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from idempotency_core.models import Operation

# Serializers are generic in the instance they render; these render dicts built
# by the views, except OperationStatusSerializer, which renders operations.


class ContactSerializer(serializers.Serializer[dict[str, Any]]):
    name = serializers.CharField(max_length=200)
    email = serializers.EmailField(max_length=254)
    phone = serializers.CharField(max_length=50, required=False, allow_blank=True)


class SubmissionSerializer(serializers.Serializer[dict[str, Any]]):
    submission_id = serializers.CharField(max_length=255, required=False)
    form = serializers.CharField(max_length=100)
    submitted_at = serializers.DateTimeField(required=False)
    contact = ContactSerializer()
    message = serializers.CharField(max_length=10_000, allow_blank=True, required=False)
    # The body's own key is "fields": DRF's metaclass moves declared fields off the
    # class, so this never hides Serializer.fields, but the stubs cannot see that.
    fields = serializers.DictField(required=False)  # type: ignore[assignment]
    revises = serializers.CharField(max_length=255, required=False)


class SubmissionAcceptedSerializer(serializers.Serializer[dict[str, Any]]):
    event_id = serializers.UUIDField()
    status = serializers.CharField()
    status_url = serializers.URLField()


class OperationStatusSerializer(serializers.Serializer[Operation]):
    step = serializers.CharField()
    status = serializers.CharField()
    attempts = serializers.IntegerField(source="attempt_count")
    destination_ref = serializers.CharField()


class SubmissionStatusSerializer(serializers.Serializer[dict[str, Any]]):
    event_id = serializers.UUIDField(source="id")
    status = serializers.CharField()
    operations = OperationStatusSerializer(many=True)


class ErrorSerializer(serializers.Serializer[dict[str, Any]]):
    code = serializers.CharField()
    detail = serializers.CharField()
