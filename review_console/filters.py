"""What the console's filters share: a day typed into a date filter, as a range.

A day becomes a half-open datetime range so that PostgreSQL can use the index on
`created_at`/`at`; a `__date` lookup would wrap the column in a cast and scan.
Each room keeps its own FilterSets (cases/filters.py, audit/filters.py).
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta

from django import forms
from django.db.models import QuerySet
from django.utils import timezone

DATE_WIDGET = forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d")


def day_start(day: date) -> datetime:
    """The first moment of `day` in the console's time zone."""
    return timezone.make_aware(datetime.combine(day, time.min), timezone.get_current_timezone())


def up_to_day(queryset: QuerySet, column: str, day: date) -> QuerySet:
    """Rows before the end of `day`. The last day Python's calendar holds has no next
    day to stop before (9999-12-31 + 1 overflows): up to it is everything."""
    if day >= date.max:
        return queryset
    return queryset.filter(**{f"{column}__lt": day_start(day + timedelta(days=1))})
