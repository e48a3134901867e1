"""Input and output shapes of the ingest API (explicit fields only)."""

from __future__ import annotations

from rest_framework import serializers


class ContactSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    email = serializers.EmailField(max_length=254)
    phone = serializers.CharField(max_length=50, required=False, allow_blank=True)


class SubmissionSerializer(serializers.Serializer):
    submission_id = serializers.CharField(max_length=255, required=False)
    form = serializers.CharField(max_length=100)
    submitted_at = serializers.DateTimeField(required=False)
    contact = ContactSerializer()
    message = serializers.CharField(max_length=10_000, allow_blank=True, required=False)
    fields = serializers.DictField(required=False)
    revises = serializers.CharField(max_length=255, required=False)


class SubmissionAcceptedSerializer(serializers.Serializer):
    event_id = serializers.UUIDField()
    status = serializers.CharField()
    status_url = serializers.URLField()


class OperationStatusSerializer(serializers.Serializer):
    step = serializers.CharField()
    status = serializers.CharField()
    attempts = serializers.IntegerField(source="attempt_count")
    destination_ref = serializers.CharField()


class SubmissionStatusSerializer(serializers.Serializer):
    event_id = serializers.UUIDField(source="id")
    status = serializers.CharField()
    operations = OperationStatusSerializer(many=True)


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    detail = serializers.CharField()
