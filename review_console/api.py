"""Staff REST API for teams that script their reviews: cases and their actions.

Same services, same permissions and same filters as the HTML console; only the
transport differs. Session authentication (settings) plus the console's own
permission classes: staff with the Reviewers permissions see and change cases,
and may replay where the case page lets them (`may_try_again`); bulk replay needs
the replay permission. A refusal by a service (`ActionRefusedError`) answers 409
with the service's explanation (`RefusalsAsConflict`); Django's PermissionDenied
answers 403 through DRF's own handler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import QueryDict
from django.utils.dateparse import parse_datetime
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import routers, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from idempotency_core.intake.api.serializers import ErrorSerializer
from idempotency_core.models import Operation, ReviewCase
from idempotency_core.review.cases import (
    RESOLUTION_CODES,
    case_close,
    case_mark_not_duplicate,
    case_mark_resolved,
    case_take_ownership,
)
from idempotency_core.review.held_duplicates import held_duplicate_link, held_duplicate_separate
from idempotency_core.review.lookup import operation_destination_lookup
from idempotency_core.review.merge import duplicate_merge_request
from idempotency_core.review.refusals import (
    ActionRefusedError,
    CaseActionRefusedError,
    ReplayRefusedError,
)
from idempotency_core.review.replay import UNPROVEN, operation_replay
from review_console.cases.bulk import bulk_replay_counts, bulk_replay_start, filter_refusal
from review_console.cases.filters import CaseFilter
from review_console.cases.selectors import case_filterset, case_queryset, replay_preview
from review_console.masking import contact_for
from review_console.models import BulkReplayJob
from review_console.permissions import (
    VIEW_CONTACT,
    CanChangeCases,
    CanReplay,
    CanViewCases,
    acting_user,
    may_try_again,
)


class OperationSerializer(serializers.ModelSerializer):
    destination = serializers.CharField(source="destination.name")

    class Meta:
        model = Operation
        fields = [
            "id",
            "step",
            "status",
            "key",
            "destination",
            "destination_ref",
            "attempt_count",
            "recovery",
            "last_error",
        ]


class CaseSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.get_username", default=None)
    event_id = serializers.UUIDField(source="event.pk", default=None)
    event_key = serializers.CharField(source="event.key", default=None)
    # A declared field named like Field.source: DRF's metaclass moves declared fields
    # off the class, which the stubs cannot follow.
    source = serializers.CharField(source="event.source.name", default=None)  # type: ignore[assignment]
    operation = OperationSerializer(default=None)

    class Meta:
        model = ReviewCase
        fields = [
            "id",
            "kind",
            "status",
            "subject",
            "summary",
            "owner",
            "event_id",
            "event_key",
            "source",
            "operation",
            "resolution_code",
            "resolution_note",
            "created_at",
            "updated_at",
            "resolved_at",
        ]


class CaseDetailSerializer(CaseSerializer):
    evidence = serializers.JSONField()
    contact = serializers.SerializerMethodField()

    class Meta(CaseSerializer.Meta):
        fields = [*CaseSerializer.Meta.fields, "evidence", "contact"]

    def get_contact(self, case: ReviewCase) -> dict[str, str]:
        user = self.context["request"].user
        payload = case.event.payload if case.event is not None else None
        return contact_for(payload, unmasked=user.has_perm(VIEW_CONTACT))


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField()


class TakeSerializer(serializers.Serializer):
    take_over = serializers.BooleanField(default=False)


class ReplaySerializer(ReasonSerializer):
    destination_checked = serializers.BooleanField(default=False)


class ResolveSerializer(ReasonSerializer):
    destination_ref = serializers.CharField(max_length=200)


class CloseSerializer(ReasonSerializer):
    resolution_code = serializers.ChoiceField(choices=list(RESOLUTION_CODES))


class MergeSerializer(ReasonSerializer):
    survivor = serializers.CharField(max_length=200)
    duplicate = serializers.CharField(max_length=200)


class CasePagination(CursorPagination):
    # Cursor pagination: stable and index-backed on a six-figure queue.
    ordering = ("created_at", "id")
    page_size = 50

    def decode_cursor(self, request: Request) -> Cursor | None:
        """DRF hands the cursor's position to the query unchecked; a position that is
        not a timestamp (garbage, NUL bytes) would be a 500. It is a 404 instead,
        DRF's own answer to an invalid cursor."""
        cursor = super().decode_cursor(request)
        position = cursor.position if cursor is not None else None
        if position is not None:
            try:
                text = str(position)
                valid = "\x00" not in text and parse_datetime(text) is not None
            except ValueError:
                valid = False
            if not valid:
                raise NotFound(self.invalid_cursor_message)
        return cursor


class RefusalsAsConflict:
    """Answers a review service's refusal (`ActionRefusedError`) with 409 Conflict and
    the service's explanation: the one place the staff API maps the family. A
    service's PermissionDenied keeps its message and DRF's `permission_denied` code."""

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, ActionRefusedError):
            return Response(
                {"code": "refused", "detail": str(exc)}, status=status.HTTP_409_CONFLICT
            )
        if isinstance(exc, DjangoPermissionDenied):
            exc = PermissionDenied(str(exc))
        return super().handle_exception(exc)  # type: ignore[misc]  # the view's own


# The staff API's answers for the schema. Session authentication answers a missing
# login with 403 (it names no WWW-Authenticate scheme), so 401 never occurs.
_STAFF_ERRORS = {
    400: OpenApiResponse(ErrorSerializer, "`invalid`: the body's field errors in `errors`."),
    403: OpenApiResponse(
        ErrorSerializer,
        "Not signed in as staff holding the permission this needs, or no CSRF token.",
    ),
    404: OpenApiResponse(ErrorSerializer, "`not_found`: no such case or job."),
    409: OpenApiResponse(
        ErrorSerializer, "`refused`: the service refused in this state; `detail` says why."
    ),
    415: OpenApiResponse(
        ErrorSerializer, "`unsupported_media_type`: send JSON (or a form encoding)."
    ),
}


def _staff_answers(
    ok: dict[int, Any], *codes: int, reworded: dict[int, str] | None = None
) -> dict[int, Any]:
    """`ok` and the listed error codes, some described for the endpoint (`reworded`)."""
    answers = {**ok, **{code: _STAFF_ERRORS[code] for code in codes}}
    for code, text in (reworded or {}).items():
        answers[code] = OpenApiResponse(ErrorSerializer, text)
    return answers


def _decision(
    body: type[serializers.Serializer],
    *,
    permission: type[BasePermission] = CanChangeCases,
    url_path: str | None = None,
) -> Callable[[Callable[..., Response]], Callable[..., Response]]:
    """A decision on one case (POST cases/<id>/<url_path>/): its body, the case's page
    as the answer, and the errors any decision may answer, in the schema."""

    def declare(view: Callable[..., Response]) -> Callable[..., Response]:
        routed = action(
            detail=True, methods=["post"], permission_classes=[permission], url_path=url_path
        )(view)
        return extend_schema(
            request=body,
            responses=_staff_answers({200: CaseDetailSerializer}, 400, 403, 404, 409, 415),
        )(routed)

    return declare


@extend_schema_view(
    list=extend_schema(
        responses=_staff_answers(
            {200: CaseSerializer(many=True)},
            400,
            403,
            404,
            reworded={
                400: "`invalid`: a filter value is not valid (field errors in `errors`).",
                404: "`not_found`: the cursor is not one this list printed.",
            },
        )
    ),
    retrieve=extend_schema(responses=_staff_answers({200: CaseDetailSerializer}, 403, 404)),
)
class CaseViewSet(RefusalsAsConflict, viewsets.ReadOnlyModelViewSet):
    """Review cases. With no `status` filter the list shows open cases only."""

    permission_classes = [CanViewCases]
    filter_backends = [DjangoFilterBackend]
    filterset_class = CaseFilter
    pagination_class = CasePagination

    def get_queryset(self):
        return (
            case_queryset()
            if self.action == "list"
            else ReviewCase.objects.select_related(
                "event__source", "operation__destination", "owner"
            )
        )

    def filter_queryset(self, queryset):
        if self.action == "list" and not self.request.query_params.getlist("status"):
            params: QueryDict = self.request.query_params.copy()
            params.setlist("status", list(ReviewCase.OPEN_STATUSES))
            filterset = CaseFilter(params, queryset=queryset, request=self.request)
            if not filterset.is_valid():
                raise serializers.ValidationError(filterset.errors)
            return filterset.qs
        return super().filter_queryset(queryset)

    def get_serializer_class(self):
        return CaseDetailSerializer if self.action == "retrieve" else CaseSerializer

    def _done(self, case: ReviewCase) -> Response:
        case = self.get_queryset().get(pk=case.pk)
        return Response(CaseDetailSerializer(case, context={"request": self.request}).data)

    def _decide(
        self,
        request: Request,
        body_class: type[serializers.Serializer],
        service: Callable[..., object],
    ) -> Response:
        """One reviewer decision on this case: the body validated, the service run as the
        acting user with its fields, the case answered as it now stands."""
        case = self.get_object()
        body = body_class(data=request.data)
        body.is_valid(raise_exception=True)
        service(case_id=case.pk, actor=acting_user(request), **body.validated_data)
        return self._done(case)

    @_decision(TakeSerializer)
    def take(self, request: Request, pk: Any = None) -> Response:
        case = self.get_object()
        body = TakeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        result = case_take_ownership(
            case_ids=[case.pk],
            actor=acting_user(request),
            take_over=body.validated_data["take_over"],
        )
        if not result.taken:
            raise CaseActionRefusedError("Already yours, owned by someone else, or not open.")
        return self._done(case)

    @extend_schema(
        request=None,
        responses=_staff_answers(
            {
                200: inline_serializer(
                    "LookupResult",
                    {
                        "found": serializers.BooleanField(
                            allow_null=True,
                            help_text="True: the effect exists (refs); false: absent; "
                            "null: the destination cannot say, check by hand.",
                        ),
                        "method": serializers.CharField(),
                        "message": serializers.CharField(),
                        "refs": serializers.ListField(child=serializers.CharField()),
                    },
                )
            },
            403,
            404,
            409,
        ),
    )
    @action(detail=True, methods=["post"], permission_classes=[CanChangeCases])
    def lookup(self, request: Request, pk: Any = None) -> Response:
        case = self.get_object()
        if case.operation_id is None:
            raise CaseActionRefusedError("This case has no operation to look up.")
        result = operation_destination_lookup(
            operation_id=case.operation_id, actor=acting_user(request), case=case
        )
        return Response(result.as_details())

    @_decision(ReplaySerializer)
    def replay(self, request: Request, pk: Any = None) -> Response:
        case = self.get_object()
        body = ReplaySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        operation = case.operation
        if operation is None:
            raise ReplayRefusedError("This case has no operation to replay.")
        # The case page's rule: a Reviewer may try again where the engine proves it safe.
        if not may_try_again(request.user, replay_preview(operation)):
            raise PermissionDenied(UNPROVEN)
        operation_replay(
            operation_id=operation.pk,
            actor=acting_user(request),
            reason=body.validated_data["reason"],
            destination_checked=body.validated_data["destination_checked"],
        )
        return self._done(case)

    @_decision(ResolveSerializer)
    def resolve(self, request: Request, pk: Any = None) -> Response:
        return self._decide(request, ResolveSerializer, case_mark_resolved)

    @_decision(CloseSerializer)
    def close(self, request: Request, pk: Any = None) -> Response:
        return self._decide(request, CloseSerializer, case_close)

    @_decision(ReasonSerializer, url_path="not-duplicate")
    def not_duplicate(self, request: Request, pk: Any = None) -> Response:
        return self._decide(request, ReasonSerializer, case_mark_not_duplicate)

    @_decision(ReasonSerializer, url_path="same-enquiry")
    def same_enquiry(self, request: Request, pk: Any = None) -> Response:
        """A held suspected duplicate is the same enquiry: linked, nothing written."""
        return self._decide(request, ReasonSerializer, held_duplicate_link)

    @_decision(ReasonSerializer, url_path="separate-enquiry")
    def separate_enquiry(self, request: Request, pk: Any = None) -> Response:
        """A held suspected duplicate is a separate enquiry: it is written as usual."""
        return self._decide(request, ReasonSerializer, held_duplicate_separate)

    @_decision(MergeSerializer)
    def merge(self, request: Request, pk: Any = None) -> Response:
        case = self.get_object()
        body = MergeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        duplicate_merge_request(
            case_id=case.pk,
            survivor_ref=data["survivor"],
            duplicate_ref=data["duplicate"],
            actor=acting_user(request),
            reason=data["reason"],
        )
        return self._done(case)


class BulkReplayRequestSerializer(ReasonSerializer):
    filter = serializers.DictField(
        child=serializers.JSONField(),
        default=dict,
        help_text='The queue filter as query parameters, e.g. {"kind": ["ambiguous_outcome"]}.',
    )


class BulkReplayJobSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.get_username")
    counts = serializers.SerializerMethodField()

    class Meta:
        model = BulkReplayJob
        fields = [
            "id",
            "status",
            "total",
            "counts",
            "reason",
            "filter_params",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
        ]

    def get_counts(self, job: BulkReplayJob) -> dict[str, int]:
        return bulk_replay_counts(job)


class BulkReplayViewSet(RefusalsAsConflict, viewsets.GenericViewSet):
    """Bulk replay of every case a filter matches, in the background, item by item
    through the same replay service. POST starts a job; GET follows its progress."""

    queryset = BulkReplayJob.objects.select_related("created_by")
    serializer_class = BulkReplayJobSerializer

    def get_permissions(self):
        return [CanReplay()] if self.action == "create" else [CanViewCases()]

    @extend_schema(responses=_staff_answers({200: BulkReplayJobSerializer}, 403, 404))
    def retrieve(self, request: Request, pk: Any = None) -> Response:
        return Response(self.get_serializer(self.get_object()).data)

    @extend_schema(
        request=BulkReplayRequestSerializer,
        responses=_staff_answers(
            {202: BulkReplayJobSerializer},
            400,
            403,
            409,
            415,
            reworded={
                400: "`invalid`: no reason, or a filter value that is not valid (in `errors`)."
            },
        ),
    )
    def create(self, request: Request) -> Response:
        body = BulkReplayRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        params = QueryDict(mutable=True)
        for key, value in body.validated_data["filter"].items():
            params.setlist(key, [str(v) for v in (value if isinstance(value, list) else [value])])
        refusal = filter_refusal(params)
        if refusal is not None:
            raise serializers.ValidationError({"filter": [refusal]})
        filterset = case_filterset(params, request=request)
        if not filterset.is_valid():
            raise serializers.ValidationError({"filter": filterset.errors})
        job = bulk_replay_start(
            actor=acting_user(request), params=params, reason=body.validated_data["reason"]
        )
        return Response(self.get_serializer(job).data, status=status.HTTP_202_ACCEPTED)


router = routers.SimpleRouter()
router.register("cases", CaseViewSet, basename="api-case")
router.register("bulk-replays", BulkReplayViewSet, basename="api-bulk-replay")
