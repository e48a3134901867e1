"""The audit trail's FilterSet (explicit `Meta.fields`: django-filter refuses implicit ones)."""

from __future__ import annotations

from datetime import date

import django_filters
from django.db.models import QuerySet

from idempotency_core.models import AuditEntry
from review_console.filters import DATE_WIDGET, day_start, up_to_day


class AuditFilter(django_filters.FilterSet):
    action = django_filters.CharFilter()
    actor = django_filters.CharFilter(field_name="actor_label", lookup_expr="icontains")
    case = django_filters.NumberFilter(field_name="case_id")
    since = django_filters.DateFilter(method="filter_since", label="On/after", widget=DATE_WIDGET)
    until = django_filters.DateFilter(method="filter_until", label="Up to", widget=DATE_WIDGET)

    class Meta:
        model = AuditEntry
        fields = ["action", "actor", "case", "since", "until"]

    def filter_since(self, queryset: QuerySet, name: str, value: date) -> QuerySet:
        return queryset.filter(at__gte=day_start(value))

    def filter_until(self, queryset: QuerySet, name: str, value: date) -> QuerySet:
        return up_to_day(queryset, "at", value)
