"""Staff REST API for teams that script their reviews: cases and their actions.

Same services, same permissions and same filters as the HTML console; only the
transport differs. Session authentication (settings) plus the console's own
permission classes: staff with the Reviewers permissions see and change cases,
replay needs the replay permission. A refusal by a service (`ActionRefusedError`)
answers 409 with the service's explanation (`RefusalsAsConflict`); Django's
PermissionDenied answers 403 through DRF's own handler.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import QueryDict
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import routers, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response

from idempotency_core.models import Operation, ReviewCase
from idempotency_core.review.cases import (
    RESOLUTION_CODES,
    case_close,
    case_mark_not_duplicate,
    case_mark_resolved,
    case_take_ownership,
)
from idempotency_core.review.lookup import operation_destination_lookup
from idempotency_core.review.merge import duplicate_merge_request
from idempotency_core.review.refusals import (
    ActionRefusedError,
    CaseActionRefusedError,
    ReplayRefusedError,
)
from idempotency_core.review.replay import operation_replay
from review_console.bulk import bulk_replay_counts, bulk_replay_start
from review_console.filters import CaseFilter
from review_console.masking import contact_for
from review_console.models import BulkReplayJob
from review_console.permissions import (
    VIEW_CONTACT,
    CanChangeCases,
    CanReplay,
    CanViewCases,
    acting_user,
)
from review_console.selectors import case_filterset, case_queryset


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

    @action(detail=True, methods=["post"], permission_classes=[CanChangeCases])
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

    @action(detail=True, methods=["post"], permission_classes=[CanChangeCases])
    def lookup(self, request: Request, pk: Any = None) -> Response:
        case = self.get_object()
        if case.operation_id is None:
            raise CaseActionRefusedError("This case has no operation to look up.")
        result = operation_destination_lookup(
            operation_id=case.operation_id, actor=acting_user(request), case=case
        )
        return Response(result.as_details())

    @action(detail=True, methods=["post"], permission_classes=[CanReplay])
    def replay(self, request: Request, pk: Any = None) -> Response:
        case = self.get_object()
        body = ReplaySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if case.operation_id is None:
            raise ReplayRefusedError("This case has no operation to replay.")
        operation_replay(
            operation_id=case.operation_id,
            actor=acting_user(request),
            reason=body.validated_data["reason"],
            destination_checked=body.validated_data["destination_checked"],
        )
        return self._done(case)

    @action(detail=True, methods=["post"], permission_classes=[CanChangeCases])
    def resolve(self, request: Request, pk: Any = None) -> Response:
        case = self.get_object()
        body = ResolveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        case_mark_resolved(case_id=case.pk, actor=acting_user(request), **body.validated_data)
        return self._done(case)

    @action(detail=True, methods=["post"], permission_classes=[CanChangeCases])
    def close(self, request: Request, pk: Any = None) -> Response:
        case = self.get_object()
        body = CloseSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        case_close(case_id=case.pk, actor=acting_user(request), **body.validated_data)
        return self._done(case)

    @action(
        detail=True,
        methods=["post"],
        permission_classes=[CanChangeCases],
        url_path="not-duplicate",
    )
    def not_duplicate(self, request: Request, pk: Any = None) -> Response:
        case = self.get_object()
        body = ReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        case_mark_not_duplicate(case_id=case.pk, actor=acting_user(request), **body.validated_data)
        return self._done(case)

    @action(detail=True, methods=["post"], permission_classes=[CanChangeCases])
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

    def retrieve(self, request: Request, pk: Any = None) -> Response:
        return Response(self.get_serializer(self.get_object()).data)

    def create(self, request: Request) -> Response:
        body = BulkReplayRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        params = QueryDict(mutable=True)
        for key, value in body.validated_data["filter"].items():
            params.setlist(key, [str(v) for v in (value if isinstance(value, list) else [value])])
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
