"""The case queue's FilterSet, shared by the queue, bulk replay and the staff API.

Explicit `Meta.fields` (django-filter refuses implicit ones).
"""

from __future__ import annotations

from datetime import date

import django_filters
from django import forms
from django.db.models import Q, QuerySet

from idempotency_core.execution.steps import STEPS
from idempotency_core.models import (
    CaseKind,
    CaseStatus,
    Destination,
    Event,
    Operation,
    ReviewCase,
    Source,
)
from idempotency_core.review.refusals import ActionRefusedError
from review_console.cases.causes import Cause, with_cause
from review_console.cases.story import destination_words
from review_console.filters import DATE_WIDGET, day_start, up_to_day
from review_console.glossary import kind_label, step_label


class CaseIdsField(forms.Field):
    """Case numbers ticked on the queue (repeated `case` parameters)."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: object) -> list[int]:
        if not value:
            return []
        values = value if isinstance(value, (list, tuple)) else [value]
        try:
            return [int(str(v)) for v in values][:1000]
        except ValueError:
            raise forms.ValidationError("Not a case number.") from None


class CaseIdsFilter(django_filters.Filter):
    field_class = CaseIdsField

    def filter(self, qs: QuerySet, value: list[int]) -> QuerySet:
        return qs.filter(pk__in=value) if value else qs


class _DestinationField(django_filters.fields.ModelChoiceField):
    def label_from_instance(self, obj: Destination) -> str:
        # What a person calls it; its configured name is a technical detail.
        words = destination_words(obj)
        return words[:1].upper() + words[1:]


class DestinationFilter(django_filters.ModelChoiceFilter):
    field_class = _DestinationField


class CaseFilter(django_filters.FilterSet):
    # distinct=False: both are columns of the case itself, so no row can repeat,
    # and a DISTINCT would stop PostgreSQL from reading the queue index in order.
    kind = django_filters.MultipleChoiceFilter(
        choices=[(value, kind_label(value)) for value in CaseKind.values], distinct=False
    )
    status = django_filters.MultipleChoiceFilter(choices=CaseStatus.choices, distinct=False)
    owner = django_filters.CharFilter(
        method="filter_owner",
        label="Owner",
        widget=forms.TextInput(attrs={"placeholder": "me, nobody or a username"}),
    )
    source = django_filters.ModelChoiceFilter(
        field_name="event__source", queryset=Source.objects.order_by("name"), label="Sent from"
    )
    destination = DestinationFilter(
        field_name="operation__destination",
        queryset=Destination.objects.order_by("name"),
        label="Sent to (CRM or mail service)",
    )
    step = django_filters.ChoiceFilter(
        method="filter_step", label="Step", choices=[(name, step_label(name)) for name in STEPS]
    )
    opened_after = django_filters.DateFilter(
        method="filter_opened_after", label="Opened on/after", widget=DATE_WIDGET
    )
    opened_before = django_filters.DateFilter(
        method="filter_opened_before", label="Opened up to", widget=DATE_WIDGET
    )
    # The cases ticked on the queue: "Replay selected" starts a bulk replay of them.
    case = CaseIdsFilter(field_name="id", label="Selected cases")
    # One cause's open cases (causes.py), from a group's "Show them" link.
    cause = django_filters.CharFilter(method="filter_cause", label="Cause")
    q = django_filters.CharFilter(
        method="filter_search",
        label="A number you were given",
        help_text="A submission's or a CRM record's number, exactly as written",
    )

    class Meta:
        model = ReviewCase
        fields = [
            "kind",
            "status",
            "owner",
            "source",
            "destination",
            "step",
            "opened_after",
            "opened_before",
            "case",
            "cause",
            "q",
        ]

    def filter_cause(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        try:
            cause = Cause.from_token(value)
        except ActionRefusedError:
            return queryset.none()
        return with_cause(queryset).filter(cause.condition())

    def filter_owner(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        value = value.strip()
        if value == "me":
            user = getattr(self.request, "user", None)
            return queryset.filter(owner=user) if user and user.is_authenticated else queryset
        if value in ("nobody", "none"):
            return queryset.filter(owner__isnull=True)
        return queryset.filter(owner__username=value) if value else queryset

    def filter_step(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        # A merge's step carries the record it merges ("merge_duplicate:rec_7").
        return queryset.filter(
            Q(operation__step=value) | Q(operation__step__startswith=f"{value}:")
        )

    def filter_opened_after(self, queryset: QuerySet, name: str, value: date) -> QuerySet:
        return queryset.filter(created_at__gte=day_start(value))

    def filter_opened_before(self, queryset: QuerySet, name: str, value: date) -> QuerySet:
        return up_to_day(queryset, "created_at", value)

    def filter_search(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        value = value.strip()
        if not value:
            return queryset
        # Exact matches only, each resolved by an index into a short id list
        # before the queue is touched, so the queue query becomes a bitmap OR of
        # the case's own foreign-key indexes: the event key through the
        # (source, key) unique index, one probe per source (there are few), the
        # operation key through its unique index, the subject through the open
        # case constraint. A substring search would scan a million events.
        sources = list(Source.objects.values_list("pk", flat=True))
        event_ids = list(
            Event.objects.filter(source_id__in=sources, key=value).values_list("pk", flat=True)
        )
        operation_ids = list(Operation.objects.filter(key=value).values_list("pk", flat=True))
        if not event_ids and not operation_ids:
            # A CRM record's number, through the partial index on destination
            # references: read only when the value is no event or operation key.
            operation_ids = list(
                Operation.objects.filter(destination_ref=value).values_list("pk", flat=True)[:100]
            )
        return queryset.filter(
            Q(event_id__in=event_ids) | Q(operation_id__in=operation_ids) | Q(subject=value)
        )
