"""The instants commands take: `--since 2026-11-01` or `--since 2026-11-01T08:00`."""

from __future__ import annotations

from datetime import UTC, datetime

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime


def parse_instant(value: str) -> datetime:
    """ISO 8601 date or date-time; naive values are UTC. ValueError otherwise."""
    parsed = parse_datetime(value)
    if parsed is None:
        day = parse_date(value)
        if day is None:
            raise ValueError(f"not an ISO 8601 date or time: {value!r}")
        parsed = datetime(day.year, day.month, day.day)
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed, UTC)
    return parsed
