"""The small vocabulary every destination adapter speaks.

An adapter call either returns an `Effect` (the destination holds the effect, and
here is its reference) or raises `DestinationError` classified as one of:

- RETRYABLE: certainly not applied (connection refused before sending, 429, 503);
- PERMANENT: refused and will be refused again (400, 401, 403, 404, 422);
- AMBIGUOUS: may have been applied (timeout after sending, connection dropped
  before the answer, 500).

The engine decides what to do with each class; adapters only classify.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum


class Classification(StrEnum):
    RETRYABLE = "retryable"
    PERMANENT = "permanent"
    AMBIGUOUS = "ambiguous"


class DestinationError(Exception):
    def __init__(
        self,
        message: str,
        *,
        classification: Classification,
        http_status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.classification = classification
        self.http_status = http_status
        self.retry_after = retry_after


@dataclass(frozen=True)
class Effect:
    """The destination holds the effect; `ref` names it there."""

    ref: str
    http_status: int | None = None
    # True when the effect already existed (409 on a unique reference, or found
    # by lookup) and was adopted rather than created by this call.
    adopted: bool = False


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds form; HTTP dates are rare here)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, (when - datetime.now(UTC)).total_seconds())
