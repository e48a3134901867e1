"""Ingest and status endpoints for sources (docs/senders.md)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.urls import get_script_prefix, reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotAuthenticated, NotFound, ValidationError
from rest_framework.parsers import BaseParser
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency_core.intake import strictjson
from idempotency_core.intake.api.authentication import SourceApiKeyAuthentication
from idempotency_core.intake.api.serializers import (
    KEY_RULE,
    KEY_SCHEMA_PATTERN,
    ErrorSerializer,
    SubmissionAcceptedSerializer,
    SubmissionSerializer,
    SubmissionStatusSerializer,
    is_event_key,
    stored_payload,
    submission_validated,
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


def _answer_header(name: str, kind: Any, description: str, statuses: list[int]) -> Any:
    """A header the answers with these statuses always carry."""
    return OpenApiParameter(
        name,
        kind,
        OpenApiParameter.HEADER,
        description=description,
        response=statuses,
        required=True,
    )


_RESPONSE_HEADERS = [
    _answer_header("Location", OpenApiTypes.URI, "The submission's status URL.", [200, 202]),
    _answer_header(
        "Idempotent-Replayed",
        OpenApiTypes.STR,
        "`true` when the answer comes from the stored event.",
        [200],
    ),
]
_RETRY_AFTER = _answer_header(
    "Retry-After",
    OpenApiTypes.INT,
    "Seconds until the source's rate admits requests again.",
    [429],
)
# What every source endpoint may answer besides its own codes.
_SOURCE_REFUSALS = {
    401: OpenApiResponse(ErrorSerializer, "No API key, or an unknown or revoked one."),
    403: OpenApiResponse(ErrorSerializer, "The source is disabled."),
    429: OpenApiResponse(ErrorSerializer, "`throttled`: over the source's rate."),
}
_REFUSALS = {
    400: OpenApiResponse(
        ErrorSerializer,
        "`invalid_json` (with the reason), `invalid` (with field errors in `errors`), "
        "`idempotency_key_missing` or `idempotency_key_invalid`.",
    ),
    411: OpenApiResponse(
        ErrorSerializer, "`length_required`: a chunked body; send it with Content-Length."
    ),
    **_SOURCE_REFUSALS,
}


class SubmissionCreateView(SourceAPIView):
    # The body is read raw: size, media type and JSON are checked here so that
    # each refusal gets its own status code and nothing of it is stored.
    parser_classes: list[type[BaseParser]] = []

    @extend_schema(
        operation_id="submissions_create",
        request={"application/json": SubmissionSerializer},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description=f"Names the logical submission ({KEY_RULE}; send it once: "
                "repeated headers are joined with commas and refused); else the body's "
                "submission_id.",
                pattern=KEY_SCHEMA_PATTERN,
            ),
            *_RESPONSE_HEADERS,
            _RETRY_AFTER,
        ],
        responses={
            202: OpenApiResponse(SubmissionAcceptedSerializer, "First receipt: the event."),
            200: OpenApiResponse(
                SubmissionAcceptedSerializer,
                "A repeat (same key, same payload): the same event and its current status.",
            ),
            **_REFUSALS,
            413: OpenApiResponse(ErrorSerializer, "`body_too_large`: over the body limit."),
            415: OpenApiResponse(
                ErrorSerializer, "`unsupported_media_type`: not application/json (UTF-8)."
            ),
            422: OpenApiResponse(
                ErrorSerializer,
                "`idempotency_key_reused`: the key names an event with another payload.",
            ),
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
        status_url = request.build_absolute_uri(_status_path(event.pk))
        if result.created:
            return Response(
                {"event_id": str(event.pk), "status": "received", "status_url": status_url},
                status=status.HTTP_202_ACCEPTED,
                headers={"Location": status_url},
            )
        current = event_status(result.statuses)
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
        try:
            validated = submission_validated(payload)
        except ValidationError as exc:
            return _refused(
                Delivery.Outcome.INVALID,
                "invalid",
                "The submission has invalid fields.",
                status.HTTP_400_BAD_REQUEST,
                errors=exc.detail,
            )
        # What was validated is what is stored (and fingerprinted): never the raw body.
        return Submission(
            key=key,
            payload=stored_payload(validated),
            submitted_at=validated.get("submitted_at"),
        )


def _status_path(event_id: uuid.UUID) -> str:
    """The event's status path, as `reverse` gives it, from one `reverse` per script
    prefix, not a resolver walk on every answer."""
    return _status_path_template(get_script_prefix()).replace(str(_ANY_EVENT), str(event_id))


_ANY_EVENT = uuid.UUID(int=0)


@lru_cache(maxsize=8)
def _status_path_template(script_prefix: str) -> str:
    # `reverse` reads the prefix itself; it is this function's key.
    return reverse("submission-detail", kwargs={"event_id": _ANY_EVENT})


def _refused(outcome: str, code: str, detail: str, http_status: int, **extra: Any) -> Refusal:
    return Refusal(outcome, _error(code, detail, http_status, **extra))


def _json_object(request: Request) -> dict[str, Any] | Refusal:
    """The body as a JSON object: right media type, a declared length within the
    limit, strict JSON (see strictjson)."""
    Outcome = Delivery.Outcome
    if not _is_utf8_json(request.content_type):
        return _refused(
            Outcome.UNSUPPORTED_MEDIA,
            "unsupported_media_type",
            "Send the submission as application/json, in UTF-8.",
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
        )
    if "CONTENT_LENGTH" not in request.META and "HTTP_TRANSFER_ENCODING" in request.META:
        # Django reads a body of the declared length only: a chunked one would be
        # read as empty and refused as "not JSON", which would mislead the sender.
        return _refused(
            Outcome.INVALID,
            "length_required",
            "Send the body with a Content-Length header, not chunked.",
            status.HTTP_411_LENGTH_REQUIRED,
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
        payload = strictjson.loads(request.body)
    except strictjson.StrictJSONError as exc:
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


def _is_utf8_json(content_type: str) -> bool:
    """application/json, with no charset or UTF-8 (JSON defines no other, RFC 8259)."""
    media_type, *params = (part.strip().lower() for part in content_type.split(";"))
    if media_type != "application/json":
        return False
    charsets = [p.partition("=")[2].strip('"') for p in params if p.startswith("charset=")]
    return all(charset in ("utf-8", "utf8") for charset in charsets)


def _idempotency_key(request: Request, payload: dict[str, Any]) -> str | Refusal:
    """The `Idempotency-Key` header, else the body's `submission_id`; checked whole
    (fullmatch: a trailing newline is not a visible character)."""
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
    if not is_event_key(key):
        return _refused(
            Delivery.Outcome.INVALID,
            "idempotency_key_invalid",
            f"The idempotency key must be {KEY_RULE}, sent once.",
            status.HTTP_400_BAD_REQUEST,
        )
    return key


class SubmissionDetailView(SourceAPIView):
    @extend_schema(
        operation_id="submissions_retrieve",
        parameters=[_RETRY_AFTER],
        responses={
            200: SubmissionStatusSerializer,
            **_SOURCE_REFUSALS,
            (404, "application/json"): OpenApiResponse(
                ErrorSerializer, "`not_found`: no such event of this source."
            ),
            # The route only matches a UUID: any other id gets Django's own page.
            (404, "text/html"): OpenApiResponse(OpenApiTypes.STR, "The id is not a UUID."),
        },
    )
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
