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
from django.db.models import F
from django.db.models.functions import Now
from django.utils import timezone

from idempotency_core.models import Destination, DestinationBudget, DestinationRequest, Operation
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
    """(spacing, tolerance) of the cell rate that spreads requests over the window: one
    every per_seconds / requests, so a window is used whole and never in one burst. A
    window of more than a minute (a day's allocation) may also be spent in bursts of a
    tenth of it: spreading 15,000 requests over a day would hold every one back for
    six seconds. The cap is the request log's (`_RESERVE`), not this shape's: a window
    as the vendor counts it holds what arrived in it, whatever the spacing was."""
    burst = 1 if per_seconds <= 60 else max(1, requests // 10)
    spacing = per_seconds / (requests - burst + 1)
    return spacing, (burst - 1) * spacing


_LOG = DestinationRequest._meta.db_table

# A request's place in the window lasts from its `at` until its answer plus the
# window: the vendor counted it at its arrival, between the two. Until answered, its
# answer is taken to come by `at` + the hold (%(hold)s seconds).
_END = (
    "COALESCE(r.finished_at, r.at + %(hold)s * interval '1 second')"
    " + b.per_seconds * interval '1 second'"
)

# One request reserved (run with the budget's row locked, so the log is the one every
# worker sees): at the earliest time that is at or after every request reserved before
# (a queue: a worker waiting for its turn is not overtaken), at the cell rate's pace,
# and when fewer than `requests` places in the log last beyond it. Every window as the
# vendor counts it then holds at most `requests`: a window ending at x counts requests
# that arrived in it, each of which holds a place at x; the places held at x only fall
# after the last `at`, so checking at the new `at` checks every x after it. Reserved
# unless paused or more than %(within)s seconds away, or when the place to free is a
# request still in flight (its end is not yet known): (id, at, now, origin, 0) or
# (NULL, the earliest time it could be, now, origin, 1 when in flight).
_RESERVE = f"""
WITH now AS (SELECT clock_timestamp() AS at),
b AS (SELECT * FROM {_TABLE} WHERE destination_id = %(destination)s),
gone AS (
    DELETE FROM {_LOG} r USING b, now
    WHERE r.destination_id = %(destination)s AND {_END} <= now.at
),
held AS (
    SELECT {_END} AS ends, r.finished_at IS NULL AS in_flight
    FROM {_LOG} r, b WHERE r.destination_id = %(destination)s
    ORDER BY ends DESC OFFSET (SELECT requests - 1 FROM b) LIMIT 1
),
slot AS (
    SELECT GREATEST(
        now.at,
        COALESCE(b.next_free_at, now.at) - b.tolerance_seconds * interval '1 second',
        (SELECT max(at) FROM {_LOG} WHERE destination_id = %(destination)s),
        (SELECT ends FROM held)
    ) AS at,
    COALESCE((SELECT in_flight FROM held), false) AS in_flight,
    COALESCE(b.paused_until, '-infinity') > now.at AS paused
    FROM b, now
),
taken AS (
    INSERT INTO {_LOG} (destination_id, at)
    SELECT %(destination)s, slot.at FROM slot, now
    WHERE NOT slot.paused AND NOT slot.in_flight
      AND slot.at <= now.at + %(within)s * interval '1 second'
    RETURNING id, at
),
moved AS (
    UPDATE {_TABLE} b SET next_free_at = GREATEST(COALESCE(b.next_free_at, t.at), t.at)
        + b.spacing_seconds * interval '1 second'
    FROM taken t WHERE b.destination_id = %(destination)s
)
SELECT (SELECT id FROM taken), slot.at, now.at, b.origin, slot.in_flight
FROM slot, now, b
"""

# A request answered: its place ends at the answer plus the window. When the answer's
# headers say the vendor counts more requests in its window than Onefold can have sent
# in it (another client of the same account), as many places are added, each lasting a
# window from now: no later than the vendor lets those go.
_FINISH = f"""
WITH now AS (SELECT clock_timestamp() AS at),
b AS (SELECT * FROM {_TABLE} WHERE destination_id = %(destination)s),
done AS (
    UPDATE {_LOG} r SET finished_at = now.at FROM now
    WHERE r.id = %(id)s RETURNING r.at AS started, r.finished_at
),
ours AS (
    SELECT count(*) AS n FROM {_LOG} r, done, b
    WHERE r.destination_id = %(destination)s AND r.at <= done.finished_at
      AND COALESCE(r.finished_at, 'infinity')
          > done.started - b.per_seconds * interval '1 second'
)
INSERT INTO {_LOG} (destination_id, at, finished_at)
SELECT %(destination)s, done.finished_at, done.finished_at
FROM done, ours, b, generate_series(1, LEAST(b.requests, %(used)s - ours.n))
WHERE %(used)s IS NOT NULL AND b.requests = %(limit)s
"""

# How long until the pause ends or the pace allows a request, and why (a pause's kind).
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
# (a setting always wins: the operator knows their tier). A new shape's pace starts from
# now: a day's pace may have run hours ahead within its burst (the log caps the window).
_ENSURE = f"""
INSERT INTO {_TABLE} (destination_id, requests, per_seconds, origin, spacing_seconds,
    tolerance_seconds, pause_kind, pause_reason, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, '', '', clock_timestamp())
ON CONFLICT (destination_id) DO UPDATE SET requests = EXCLUDED.requests,
    per_seconds = EXCLUDED.per_seconds, origin = EXCLUDED.origin,
    spacing_seconds = EXCLUDED.spacing_seconds, tolerance_seconds = EXCLUDED.tolerance_seconds,
    next_free_at = CASE WHEN ({_TABLE}.spacing_seconds, {_TABLE}.tolerance_seconds)
        = (EXCLUDED.spacing_seconds, EXCLUDED.tolerance_seconds) THEN {_TABLE}.next_free_at
        ELSE LEAST({_TABLE}.next_free_at, EXCLUDED.updated_at) END,
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
    worker): `delay` seconds after it was reserved. `id` is its place in the log, to be
    given back with `budget_finish` once answered; `origin` is where the budget in force
    came from when it was reserved."""

    at: datetime
    delay: float
    id: int = 0
    origin: str = ""


@dataclass(frozen=True)
class Turn:
    """No request reserved: the earliest one could go is `seconds` away, or sooner
    when `in_flight` (a request still in flight holds the place, until its answer)."""

    seconds: float
    in_flight: bool = False


def _hold_seconds() -> float:
    """How long an unanswered request is taken to hold its place before its answer: a
    request's phases each have the HTTP timeout (connect, send, read), so three."""
    return 3 * float(settings.ONEFOLD_HTTP_TIMEOUT_SECONDS) + 1.0


def budget_take(destination_id: int, budget: Budget, *, within: float = 0.0) -> Reservation | Turn:
    """Reserves one request of the destination's budget at the earliest time allowed
    (`_RESERVE`), if that is at most `within` seconds away."""
    _ensure(destination_id, budget)
    params = {
        "destination": destination_id,
        "within": max(0.0, within),
        "hold": _hold_seconds(),
    }
    with transaction.atomic(), connection.cursor() as cursor:
        # The budget's row locked first: the log read next is the one every worker sees.
        cursor.execute(
            f"SELECT 1 FROM {_TABLE} WHERE destination_id = %s FOR UPDATE", [destination_id]
        )
        if cursor.fetchone() is None:
            # The row this process made is gone (its destination re-created, a test's
            # rollback): made again.
            _forget(destination_id)
            _ensure(destination_id, budget)
        cursor.execute(_RESERVE, params)
        row = cursor.fetchone()
    if row is None:
        return Turn(seconds=0.05)
    taken, at, now, origin, in_flight = row
    if taken is None:
        return Turn(seconds=max(0.0, (at - now).total_seconds()), in_flight=bool(in_flight))
    return Reservation(at=at, delay=(at - now).total_seconds(), id=taken, origin=origin)


def budget_reserve(
    destination_id: int, budget: Budget, *, within: float = 0.0
) -> Reservation | None:
    """`budget_take`, None when nothing was reserved."""
    taken = budget_take(destination_id, budget, within=within)
    return taken if isinstance(taken, Reservation) else None


def budget_finish(
    destination_id: int,
    reservation: Reservation,
    *,
    used: int | None = None,
    limit: int | None = None,
) -> None:
    """The reserved request was answered (or given up): its place ends a window from
    now. `used` of `limit` is what the answer's headers say the vendor counts in its
    window; more than Onefold can have sent adds places for the difference."""
    with connection.cursor() as cursor:
        cursor.execute(
            _FINISH,
            {"destination": destination_id, "id": reservation.id, "used": used, "limit": limit},
        )


def budget_rate_limited(destination_id: int, *, known: bool) -> None:
    """Counts a 429 the destination answered: `known`, after its budget was learned
    from its headers or set by the operator (/metrics)."""
    field = "rate_limited_known" if known else "rate_limited_unknown"
    DestinationBudget.objects.filter(pk=destination_id).update(**{field: F(field) + 1})


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
    """`integrations.http.RequestGate` for a destination: every request waits for its
    place in the destination's budget, and every answer's rate-limit headers are learned."""

    def __init__(self, destination: Destination, budget: Budget | None) -> None:
        self.destination = destination
        self.budget = budget
        self.scope = f"budget:{destination.pk}"
        # The request this thread is sending (send() calls before and after in turn).
        self._local = threading.local()

    def before(self, method: str, url: str) -> None:
        if self.budget is None:
            return
        deadline = time.monotonic() + settings.ONEFOLD_BUDGET_MAX_WAIT_SECONDS
        while True:
            left = deadline - time.monotonic()
            taken = budget_take(self.destination.pk, self.budget, within=max(0.0, left))
            if isinstance(taken, Turn):
                if not taken.in_flight or left <= 0:
                    raise _waiting(self.destination, taken)
                # A request in flight holds the place: its answer frees it, soon.
                time.sleep(min(left, max(0.01, self.budget.per_seconds / self.budget.requests)))
                continue
            turn = time.monotonic() + max(0.0, taken.delay)
            if taken.delay > 0:  # our turn comes after the requests reserved before ours
                time.sleep(taken.delay)
            if time.monotonic() - turn > _hold_seconds() / 2:
                # Held up past what its place assumes (a frozen process): taken again.
                budget_finish(self.destination.pk, taken)
                continue
            self._local.reservation = taken
            return

    def after(self, response: httpx.Response) -> None:
        reservation = self._take_reservation()
        if self.budget is None or reservation is None:
            return
        hint = budget_hint(response)
        if response.status_code == 429:
            known = reservation.origin in ("learned", "configured")
            budget_rate_limited(self.destination.pk, known=known)
        used = limit = None
        if hint is not None and hint.limit:
            self._learn(hint.limit, hint.window_seconds, daily=hint.daily)
            # A day's usage is not waited out here: spent over the last 24 hours, it
            # frees as it ages, which the header does not say; the vendor's refusal
            # pauses the destination and a probe finds when it has room again.
            if hint.remaining is not None and hint.limit == self.budget.requests and not hint.daily:
                used, limit = max(0, hint.limit - hint.remaining), hint.limit
        budget_finish(self.destination.pk, reservation, used=used, limit=limit)

    def failed(self) -> None:
        """The request had no answer: its place ends a window from now."""
        reservation = self._take_reservation()
        if reservation is not None:
            budget_finish(self.destination.pk, reservation)

    def _take_reservation(self) -> Reservation | None:
        reservation: Reservation | None = getattr(self._local, "reservation", None)
        self._local.reservation = None
        return reservation

    def _learn(self, limit: int, window: float | None, *, daily: bool) -> None:
        """The answer's limit (and window, where its headers give one: else the
        documented window) becomes the budget, unless the operator configured one. A
        day's count is learned only by a destination whose budget is a day's."""
        budget = self.budget
        if budget is None or budget.origin == "configured":
            return
        if daily != (budget.per_seconds >= 24 * 3600):
            return
        learned = Budget(limit, window or budget.per_seconds, "learned")
        if (learned.requests, learned.per_seconds) != (budget.requests, budget.per_seconds):
            self.budget = learned
            _ensure(self.destination.pk, learned)


class BudgetWaitError(DestinationError):
    """Onefold's own budget or pause held the request back: nothing was sent, and the
    destination is not paused again for it."""


def _waiting(destination: Destination, turn: Turn) -> BudgetWaitError:
    wait = budget_wait(destination.pk)
    if wait.pause:
        message = f"{destination.name} is paused ({wait.reason or wait.pause}): not called"
    else:
        wait = Wait(seconds=max(0.01, turn.seconds))
        message = f"{destination.name}'s request budget is spent for {wait.seconds:.1f} s"
    return BudgetWaitError(
        message,
        classification=Classification.RETRYABLE,
        retry_after=wait.seconds,
        rate_limit=RateLimit.DAILY if wait.pause == Pause.DAILY else RateLimit.WINDOW,
    )
