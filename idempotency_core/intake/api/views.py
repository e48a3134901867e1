"""Ingest and status endpoints for sources (CONTRACT.md, "Ingest API")."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotAuthenticated, NotFound
from rest_framework.parsers import BaseParser
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency_core.intake.api.authentication import SourceApiKeyAuthentication
from idempotency_core.intake.api.serializers import (
    ErrorSerializer,
    SubmissionAcceptedSerializer,
    SubmissionSerializer,
    SubmissionStatusSerializer,
)
from idempotency_core.intake.api.throttling import SourceRateThrottle
from idempotency_core.intake.ingest import (
    InvalidRevisionError,
    KeyReusedError,
    delivery_refused,
    event_ingest,
    event_status,
)
from idempotency_core.models import Delivery, Event, Source

# 1 to 255 visible ASCII characters (CONTRACT.md).
IDEMPOTENCY_KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")


@dataclass(frozen=True)
class Submission:
    key: str
    payload: dict[str, Any]
    submitted_at: datetime | None


@dataclass(frozen=True)
class Refusal:
    outcome: str
    response: Response


def request_source(request: Request) -> Source:
    """The source whose API key authenticated the request (DRF types `auth` loosely)."""
    if not isinstance(request.auth, Source):
        raise NotAuthenticated("Send `Authorization: Api-Key <key>`.")
    return request.auth


class IsSource(BasePermission):
    def has_permission(self, request: Request, view: APIView) -> bool:
        request_source(request)
        return True


def _error(code: str, detail: str, http_status: int, **extra: Any) -> Response:
    return Response({"code": code, "detail": detail, **extra}, status=http_status)


class SourceAPIView(APIView):
    authentication_classes = [SourceApiKeyAuthentication]
    permission_classes = [IsSource]
    throttle_classes = [SourceRateThrottle]


class SubmissionCreateView(SourceAPIView):
    # The body is read raw: size, media type and JSON are checked here so that
    # each refusal gets its own status code and nothing of it is stored.
    parser_classes: list[type[BaseParser]] = []

    @extend_schema(
        operation_id="submissions_create",
        request=SubmissionSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="Names the logical submission; else the body's submission_id.",
            )
        ],
        responses={
            202: SubmissionAcceptedSerializer,
            200: OpenApiResponse(SubmissionAcceptedSerializer, "Repeat of a known submission."),
            400: ErrorSerializer,
            401: ErrorSerializer,
            403: ErrorSerializer,
            413: ErrorSerializer,
            415: ErrorSerializer,
            422: ErrorSerializer,
            429: ErrorSerializer,
        },
    )
    def post(self, request: Request) -> Response:
        source = request_source(request)
        parsed = self._parse(request)
        if isinstance(parsed, Refusal):
            delivery_refused(
                source=source, outcome=parsed.outcome, status_code=parsed.response.status_code
            )
            return parsed.response
        try:
            result = event_ingest(
                source=source,
                key=parsed.key,
                payload=parsed.payload,
                submitted_at=parsed.submitted_at,
            )
        except InvalidRevisionError as exc:
            delivery_refused(source=source, outcome=Delivery.Outcome.INVALID, status_code=400)
            return _error(
                "invalid",
                "The submission has invalid fields.",
                status.HTTP_400_BAD_REQUEST,
                errors={"revises": [str(exc)]},
            )
        except KeyReusedError as exc:
            return _error(
                "idempotency_key_reused",
                "This idempotency key was used for a different payload. Send edits under a "
                "new key.",
                status.HTTP_422_UNPROCESSABLE_ENTITY,
                event_id=str(exc.event.pk),
            )
        event = result.event
        status_url = request.build_absolute_uri(
            reverse("submission-detail", kwargs={"event_id": event.pk})
        )
        if result.created:
            return Response(
                {"event_id": str(event.pk), "status": "received", "status_url": status_url},
                status=status.HTTP_202_ACCEPTED,
                headers={"Location": status_url},
            )
        current = event_status(list(event.operations.values_list("status", flat=True)))
        return Response(
            {"event_id": str(event.pk), "status": current, "status_url": status_url},
            status=status.HTTP_200_OK,
            headers={"Idempotent-Replayed": "true", "Location": status_url},
        )

    def _parse(self, request: Request) -> Submission | Refusal:
        """The submission, or the first reason to refuse it, checked cheapest first."""
        payload = _json_object(request)
        if isinstance(payload, Refusal):
            return payload
        key = _idempotency_key(request, payload)
        if isinstance(key, Refusal):
            return key
        serializer = SubmissionSerializer(data=payload)
        if not serializer.is_valid():
            return _refused(
                Delivery.Outcome.INVALID,
                "invalid",
                "The submission has invalid fields.",
                status.HTTP_400_BAD_REQUEST,
                errors=serializer.errors,
            )
        return Submission(
            key=key, payload=payload, submitted_at=serializer.validated_data.get("submitted_at")
        )


def _refused(outcome: str, code: str, detail: str, http_status: int, **extra: Any) -> Refusal:
    return Refusal(outcome, _error(code, detail, http_status, **extra))


def _json_object(request: Request) -> dict[str, Any] | Refusal:
    """The body as a JSON object: right media type, within the size limit, valid JSON."""
    Outcome = Delivery.Outcome
    if request.content_type.split(";")[0].strip().lower() != "application/json":
        return _refused(
            Outcome.UNSUPPORTED_MEDIA,
            "unsupported_media_type",
            "Send the submission as application/json.",
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
        )
    limit = settings.ONEFOLD_MAX_BODY_BYTES
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit or len(request.body) > limit:
        return _refused(
            Outcome.TOO_LARGE,
            "body_too_large",
            f"The body is larger than {limit} bytes.",
            status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    try:
        payload = json.loads(request.body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return _refused(
            Outcome.INVALID,
            "invalid_json",
            f"The body is not valid JSON: {exc}",
            status.HTTP_400_BAD_REQUEST,
        )
    if not isinstance(payload, dict):
        return _refused(
            Outcome.INVALID,
            "invalid_json",
            "The body must be a JSON object.",
            status.HTTP_400_BAD_REQUEST,
        )
    return payload


def _idempotency_key(request: Request, payload: dict[str, Any]) -> str | Refusal:
    """The `Idempotency-Key` header, else the body's `submission_id`; checked."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        key = payload.get("submission_id")
    if key is None or key == "":
        return _refused(
            Delivery.Outcome.KEY_MISSING,
            "idempotency_key_missing",
            "Send an Idempotency-Key header or a submission_id in the body.",
            status.HTTP_400_BAD_REQUEST,
        )
    if not isinstance(key, str) or not IDEMPOTENCY_KEY_RE.match(key):
        return _refused(
            Delivery.Outcome.INVALID,
            "idempotency_key_invalid",
            "The idempotency key must be 1 to 255 visible ASCII characters.",
            status.HTTP_400_BAD_REQUEST,
        )
    return key


class SubmissionDetailView(SourceAPIView):
    @extend_schema(operation_id="submissions_retrieve", responses={200: SubmissionStatusSerializer})
    def get(self, request: Request, event_id: uuid.UUID) -> Response:
        event = Event.objects.filter(pk=event_id, source=request_source(request)).first()
        if event is None:
            raise NotFound("No such submission for this source.")
        operations = list(event.operations.order_by("position"))
        data = SubmissionStatusSerializer(
            {
                "id": event.pk,
                "status": event_status([op.status for op in operations]),
                "operations": operations,
            }
        ).data
        return Response(data)
