"""The instants vendors write, and the midnights their daily limits reset at."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo


def seconds_to_midnight(zone: str, *, now: datetime | None = None) -> float:
    """Seconds from `now` to the next midnight in time zone `zone`."""
    local = (now or datetime.now(UTC)).astimezone(ZoneInfo(zone))
    midnight = (local + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    # Subtracted in UTC: aware datetimes of one zone subtract as wall clocks, wrong
    # across a daylight-saving change.
    return max(1.0, (midnight.astimezone(UTC) - local.astimezone(UTC)).total_seconds())


def utc_instant(value: str) -> datetime:
    """An ISO 8601 instant ("Z" for UTC), read as UTC when it has no offset."""
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
