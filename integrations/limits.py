"""A destination's request limits: what its vendor documents (`RequestBudget`), what
each answer's headers say of them (`BudgetHint`), which one refused a request
(`RateLimit`), and the gate every request of an HTTP adapter passes (`RequestGate`).

The engine shares a destination's budget between every worker; adapters only declare
it and read the answers (`integrations.http`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import httpx


class RateLimit(StrEnum):
    """Which of a destination's limits refused a request (DestinationError.rate_limit):
    each is a wait, never a failed attempt."""

    NONE = ""
    # A short window (HubSpot's ten seconds, Resend's second): asked again after its reset,
    # without spending one of the operation's bounded attempts.
    WINDOW = "window"
    # A day's allowance is spent (HubSpot's DAILY policy, Salesforce's
    # REQUEST_LIMIT_EXCEEDED): the destination's work is parked until the reset.
    DAILY = "daily"
    # Not a limit of the destination's but of this one request: the same request (its
    # idempotency key) is still being processed (Resend's 409
    # concurrent_idempotent_requests). This attempt did nothing; it is asked again after
    # `retry_after`, not counted, and nothing else waits.
    IN_PROGRESS = "in_progress"


class RequestGate(Protocol):
    """What surrounds each request to a destination (`integrations.http.send`): `before`
    waits for the destination's shared budget, or raises a RETRYABLE `DestinationError`
    with `rate_limit` set when the wait would be long; `after` learns from the answer's
    rate-limit headers; `failed` (optional) is told when no answer came. `scope` names
    what it spends: two gates of one scope around one request are one."""

    scope: str

    def before(self, method: str, url: str) -> None: ...

    def after(self, response: httpx.Response) -> None: ...


class Gated(Protocol):
    """An HTTP adapter: each of its requests goes through `gate` (None: no budget)."""

    gate: RequestGate | None


@dataclass(frozen=True)
class RequestBudget:
    """How many requests a destination accepts, as its vendor documents it: `requests`
    in any `per_seconds`, and `daily` in a day where there is such a limit. `source`
    names the vendor's page. The engine shares it between every worker."""

    requests: int
    per_seconds: float
    source: str
    daily: int | None = None


@dataclass(frozen=True)
class BudgetHint:
    """What one answer's rate-limit headers say (`integrations.http.budget_hint`):
    learned from the destination rather than assumed. Any part may be unknown."""

    limit: int | None = None
    remaining: int | None = None
    # Seconds until the window (or, `daily`, the day's allowance) starts again.
    reset_seconds: float | None = None
    window_seconds: float | None = None
    daily: bool = False
