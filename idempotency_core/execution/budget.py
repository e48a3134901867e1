"""A destination's request budget and pauses, shared by every worker on every machine."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from idempotency_core.models import Destination, DestinationBudget, Operation
from integrations.base import Classification, DestinationError, RateLimit, RequestBudget
from integrations.http import budget_hint

logger = logging.getLogger(__name__)

Pause = DestinationBudget.Pause

_TABLE = DestinationBudget._meta.db_table


@dataclass(frozen=True)
class Budget:
    """The budget in force for a destination, and where it comes from."""

    requests: int
    per_seconds: float
    origin: str  # "documented", "configured" or "learned"


class BudgetSettingError(ValueError):
    """An ONEFOLD_RATE_LIMIT_<NAME> value that is not "N/SECONDS" or "off"."""


def setting_name(destination: Destination) -> str:
    return "ONEFOLD_RATE_LIMIT_" + destination.name.upper().replace("-", "_")


def budget_for(destination: Destination, documented: RequestBudget | None) -> Budget | None:
    """The documented budget, unless ONEFOLD_RATE_LIMIT_<NAME> replaces it; None: none."""
    name = setting_name(destination)
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        if documented is None:
            return None
        return Budget(documented.requests, float(documented.per_seconds), "documented")
    if raw == "off":
        return None
    requests, slash, seconds = raw.partition("/")
    try:
        budget = Budget(int(requests), float(seconds), "configured")
    except ValueError:
        budget = None
    if not slash or budget is None or budget.requests < 1 or not budget.per_seconds > 0:
        raise BudgetSettingError(
            f'{name} must be "REQUESTS/SECONDS" (e.g. 100/10) or "off", not {raw!r}'
        )
    return budget


def _shape(requests: int, per_seconds: float) -> tuple[float, float]:
    """(spacing, tolerance) of a cell rate that lets `requests` through in any window of
    `per_seconds` and never more: a burst of `b`, then one every `spacing`. A window
    then holds at most b - 1 + per_seconds / spacing requests, which spacing
    per_seconds / (requests - b + 1) makes `requests`. A tenth of the budget may come
    at once (at least one)."""
    burst = max(1, requests // 10)
    # A thousandth more: a window that counts both its ends (or a clock's rounding) does
    # not see one request too many at its edge.
    spacing = per_seconds / (requests - burst + 1) * 1.001
    return spacing, (burst - 1) * spacing


# One request reserved, at the earliest time the budget allows it, unless the destination
# is paused or that time is more than %s seconds away: the time reserved. Reservations
# are a queue (each moves the next free time on), so a worker that waits for its turn
# is not overtaken by one that arrived later.
_RESERVE = f"""
WITH now AS (SELECT clock_timestamp() AS at)
UPDATE {_TABLE} b
SET next_free_at = GREATEST(COALESCE(b.next_free_at, now.at), now.at)
    + b.spacing_seconds * interval '1 second'
FROM now
WHERE b.destination_id = %s
  AND COALESCE(b.paused_until, '-infinity') <= now.at
  AND GREATEST(COALESCE(b.next_free_at, now.at), now.at)
      <= now.at + (b.tolerance_seconds + %s) * interval '1 second'
RETURNING GREATEST(
    b.next_free_at - (b.spacing_seconds + b.tolerance_seconds) * interval '1 second', now.at
), now.at
"""

# Otherwise, how long until it would: the pause's end, or the next free request.
_WAIT = f"""
WITH now AS (SELECT clock_timestamp() AS at)
SELECT GREATEST(
    EXTRACT(EPOCH FROM COALESCE(b.paused_until, now.at) - now.at),
    EXTRACT(EPOCH FROM COALESCE(b.next_free_at, now.at) - now.at) - b.tolerance_seconds,
    0.0
)::float, CASE WHEN b.paused_until > now.at THEN b.pause_kind ELSE '' END,
CASE WHEN b.paused_until > now.at THEN b.pause_reason ELSE '' END
FROM {_TABLE} b, now WHERE b.destination_id = %s
"""

# The row made, or its budget replaced unless the destination's headers taught another
# (a setting always wins: the operator knows their tier).
_ENSURE = f"""
INSERT INTO {_TABLE} (destination_id, requests, per_seconds, origin, spacing_seconds,
    tolerance_seconds, pause_kind, pause_reason, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, '', '', clock_timestamp())
ON CONFLICT (destination_id) DO UPDATE SET requests = EXCLUDED.requests,
    per_seconds = EXCLUDED.per_seconds, origin = EXCLUDED.origin,
    spacing_seconds = EXCLUDED.spacing_seconds, tolerance_seconds = EXCLUDED.tolerance_seconds,
    updated_at = EXCLUDED.updated_at
WHERE {_TABLE}.origin <> 'learned' OR EXCLUDED.origin = 'configured'
"""

_ensured_lock = threading.Lock()
# (pid, destination id) -> the budget this process last wrote for it.
_ensured: dict[tuple[int, int], Budget] = {}


def _ensure(destination_id: int, budget: Budget) -> None:
    key = (os.getpid(), destination_id)
    with _ensured_lock:
        if _ensured.get(key) == budget:
            return
    spacing, tolerance = _shape(budget.requests, budget.per_seconds)
    with connection.cursor() as cursor:
        cursor.execute(
            _ENSURE,
            [
                destination_id,
                budget.requests,
                budget.per_seconds,
                budget.origin,
                spacing,
                tolerance,
            ],
        )
    with _ensured_lock:
        _ensured[key] = budget


def _forget(destination_id: int) -> None:
    with _ensured_lock:
        _ensured.pop((os.getpid(), destination_id), None)


def budget_forget() -> None:
    """Forgets what this process wrote (tests that change a setting mid-run)."""
    with _ensured_lock:
        _ensured.clear()


@dataclass(frozen=True)
class Reservation:
    """A request of the budget, to be sent `at` (the database's clock, one for every
    worker): `delay` seconds after it was reserved."""

    at: datetime
    delay: float


def budget_reserve(
    destination_id: int, budget: Budget, *, within: float = 0.0
) -> Reservation | None:
    """Reserves one request of the destination's budget at the earliest time allowed, if
    that is at most `within` seconds away; None otherwise (or while it is paused)."""
    _ensure(destination_id, budget)
    with connection.cursor() as cursor:
        cursor.execute(_RESERVE, [destination_id, max(0.0, within)])
        row = cursor.fetchone()
        if row is None and not DestinationBudget.objects.filter(pk=destination_id).exists():
            # The row this process made is gone (its destination re-created, a test's
            # rollback): made again, and asked again.
            _forget(destination_id)
            _ensure(destination_id, budget)
            cursor.execute(_RESERVE, [destination_id, max(0.0, within)])
            row = cursor.fetchone()
    if row is None:
        return None
    at, now = row
    return Reservation(at=at, delay=(at - now).total_seconds())


@dataclass(frozen=True)
class Wait:
    """No request may go for `seconds`; `pause` says why when the destination is paused."""

    seconds: float
    pause: str = ""
    reason: str = ""


def budget_wait(destination_id: int) -> Wait:
    """How long until the destination's budget has a request free, or its pause ends."""
    with connection.cursor() as cursor:
        cursor.execute(_WAIT, [destination_id])
        row = cursor.fetchone()
    if row is None:  # the row vanished (the destination was deleted): nothing to wait for
        return Wait(seconds=0.01)
    return Wait(seconds=max(0.01, float(row[0])), pause=row[1], reason=row[2])


def destination_pause(
    destination: Destination, *, seconds: float, kind: str, reason: str
) -> datetime:
    """Pauses the destination for every worker, at least `seconds` (a longer pause in
    force stands), and moves its due work to the pause's end: nothing is claimed
    meanwhile. Returns the pause's end."""
    now = timezone.now()
    until = now + timedelta(seconds=max(0.0, seconds))
    with transaction.atomic():
        budget, _ = DestinationBudget.objects.select_for_update().get_or_create(
            destination=destination
        )
        if budget.paused_until is not None and budget.paused_until > until:
            until = budget.paused_until
        else:
            budget.paused_until = until
            budget.pause_kind = kind
            budget.pause_reason = reason[:2000]
            if budget.paused_at is None or budget.pause_kind != kind:
                budget.paused_at = now
            budget.save()
        Operation.objects.filter(
            destination=destination,
            status__in=Operation.CLAIMABLE,
            next_attempt_at__lt=until,
        ).update(next_attempt_at=until, updated_at=now)
    logger.warning("destination %s paused until %s (%s)", destination.name, until.isoformat(), kind)
    return until


def pauses_in_force() -> list[DestinationBudget]:
    """The destinations paused now, with their destination, soonest end first."""
    return list(
        DestinationBudget.objects.filter(paused_until__gt=Now())
        .select_related("destination")
        .order_by("paused_until")
    )


class BudgetGate:
    """`integrations.http.request_gate` for one attempt: every request waits for the
    destination's budget, and every answer's rate-limit headers are learned."""

    def __init__(self, destination: Destination, budget: Budget | None) -> None:
        self.destination = destination
        self.budget = budget

    def before(self, method: str, url: str) -> None:
        if self.budget is None:
            return
        within = settings.ONEFOLD_BUDGET_MAX_WAIT_SECONDS
        reserved = budget_reserve(self.destination.pk, self.budget, within=within)
        if reserved is None:
            raise _waiting(self.destination, budget_wait(self.destination.pk))
        if reserved.delay > 0:  # our turn comes after the requests reserved before ours
            time.sleep(reserved.delay)

    def after(self, response: httpx.Response) -> None:
        if self.budget is None:
            return
        hint = budget_hint(response)
        if hint is None or hint.daily or response.status_code == 429:
            # A 429 is the adapter's to word, and the engine pauses on it; a day's count
            # is the vendor's to enforce (its 429 says DAILY). "None remaining" is not
            # acted on: pacing at the budget leaves none after every window's last
            # request; another integration spending the window shows as a 429.
            return
        if (
            hint.limit
            and hint.window_seconds
            and (hint.limit, hint.window_seconds) != (self.budget.requests, self.budget.per_seconds)
            and self.budget.origin != "configured"
        ):
            self.budget = Budget(hint.limit, hint.window_seconds, "learned")
            _ensure(self.destination.pk, self.budget)


class BudgetWaitError(DestinationError):
    """Onefold's own budget or pause held the request back: nothing was sent, and the
    destination is not paused again for it."""


def _waiting(destination: Destination, wait: Wait) -> BudgetWaitError:
    if wait.pause:
        message = f"{destination.name} is paused ({wait.reason or wait.pause}): not called"
    else:
        message = f"{destination.name}'s request budget is spent for {wait.seconds:.1f} s"
    return BudgetWaitError(
        message,
        classification=Classification.RETRYABLE,
        retry_after=wait.seconds,
        rate_limit=RateLimit.DAILY if wait.pause == Pause.DAILY else RateLimit.WINDOW,
    )
