"""HubSpot's request limits as its usage guidelines state them, counted for the emulator.

A private app on a Free or Starter account may send 100 requests in any rolling
10 seconds, and the account 250,000 requests a day, reset at the account's
midnight (https://developers.hubspot.com/docs/developer-tooling/platform/usage-guidelines,
formerly /docs/api/usage-details; https://developers.hubspot.com/apisbytier: "100
requests/10 seconds and 250,000 requests/day for Free and Starter accounts ... The
daily limits reset at midnight based on the time zone setting of the HubSpot
account"). The CRM search endpoints have a limit of their own per token: five
requests a second (the search guide's "Limitations",
https://developers.hubspot.com/docs/api/crm/search, as PipedreamHQ/pipedream#18215
met it in 2025; the changelog "CRM Search API Rate Limit Increase" of 2020 had
raised it from one to four). A search request is also a request, so it counts
against the other limits too.

Every answer to an authenticated request carries the limits and what is left of
them: X-HubSpot-RateLimit-Max, -Remaining and -Interval-Milliseconds for the ten
seconds, X-HubSpot-RateLimit-Daily and -Daily-Remaining for the day (developer
changelog 2018-11-06, "Rate limit information headers will be included in HTTP
responses"; the usage guidelines' header table). A refused request is not counted.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

WINDOW_SECONDS = 10.0
SEARCH_WINDOW_SECONDS = 1.0


class Policy:
    """HubSpot's `policyName` values for a 429, one per limit."""

    TEN_SECONDLY_ROLLING = "TEN_SECONDLY_ROLLING"
    DAILY = "DAILY"
    # The usage guidelines' own example of a 429 names the per-second limit so; the
    # search endpoints' limit is the only per-second one left.
    SECONDLY = "SECONDLY"


@dataclass(frozen=True)
class Limits:
    """Requests allowed: per token in any 10 seconds, per account per day, per token
    per second on search. None lifts that limit."""

    ten_secondly: int | None = 100
    daily: int | None = 250_000
    search_per_second: int | None = 5
    # The rolling window of `ten_secondly`: HubSpot's is ten seconds; a test may shorten
    # it (the answers' X-HubSpot-RateLimit-Interval-Milliseconds say so, as HubSpot's do).
    window_seconds: float = WINDOW_SECONDS


DEFAULT_LIMITS = Limits()
NO_LIMITS = Limits(ten_secondly=None, daily=None, search_per_second=None)


@dataclass(frozen=True)
class Verdict:
    """One request's fate: `refused_by` names the policy that refused it (None: let
    through, and counted); `headers` are the X-HubSpot-RateLimit-* its answer carries;
    `retry_after` is when the refusing window next has room (None for the day)."""

    headers: dict[str, str]
    refused_by: str | None = None
    retry_after: float | None = None


@dataclass
class _Usage:
    day: str = ""
    daily: int = 0
    ten_seconds: dict[str, deque[float]] = field(default_factory=dict)
    search: dict[str, deque[float]] = field(default_factory=dict)
    # Requests let through, and the most one token's window ever held (the proof that
    # a client kept to the limit is in the refusals: none).
    admitted: int = 0
    window_peak: int = 0


def _today() -> str:
    """The account's day. The emulated account's time zone is UTC."""
    return datetime.now(UTC).date().isoformat()


class RequestLimiter:
    """Counts requests against `Limits`; thread-safe. `clock` is monotonic seconds."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        today: Callable[[], str] = _today,
    ) -> None:
        self._clock = clock
        self._today = today
        self._lock = threading.Lock()
        self._usage = _Usage()

    def reset(self) -> None:
        with self._lock:
            self._usage = _Usage()

    def counts(self) -> dict[str, int]:
        """Requests let through since the reset, and the most in one window."""
        with self._lock:
            return {"admitted": self._usage.admitted, "window_peak": self._usage.window_peak}

    def new_day(self) -> None:
        """The account's midnight has passed: the day's allowance is whole again."""
        with self._lock:
            self._usage.daily = 0

    def take(self, token: str, *, limits: Limits, search: bool = False) -> Verdict:
        """Counts one request by `token` if every limit has room, else refuses it."""
        with self._lock:
            now = self._clock()
            usage = self._usage
            if usage.day != self._today():
                usage.day, usage.daily = self._today(), 0
            recent = _pruned(usage.ten_seconds, token, now, limits.window_seconds)
            searches = _pruned(usage.search, token, now, SEARCH_WINDOW_SECONDS)
            refused_by, retry_after = None, None
            if limits.daily is not None and usage.daily >= limits.daily:
                refused_by = Policy.DAILY
            elif limits.ten_secondly is not None and len(recent) >= limits.ten_secondly:
                refused_by = Policy.TEN_SECONDLY_ROLLING
                retry_after = recent[0] + limits.window_seconds - now
            elif (
                search
                and limits.search_per_second is not None
                and len(searches) >= limits.search_per_second
            ):
                refused_by = Policy.SECONDLY
                retry_after = searches[0] + SEARCH_WINDOW_SECONDS - now
            if refused_by is None:
                usage.daily += 1
                recent.append(now)
                usage.admitted += 1
                usage.window_peak = max(usage.window_peak, len(recent))
                if search:
                    searches.append(now)
            return Verdict(
                headers=_headers(limits, recent=len(recent), daily=usage.daily),
                refused_by=refused_by,
                retry_after=retry_after,
            )


def _pruned(
    windows: dict[str, deque[float]], token: str, now: float, seconds: float
) -> deque[float]:
    """The token's request times within the last `seconds`, oldest first."""
    times = windows.setdefault(token, deque())
    while times and times[0] <= now - seconds:
        times.popleft()
    return times


def _headers(limits: Limits, *, recent: int, daily: int) -> dict[str, str]:
    headers = {}
    if limits.ten_secondly is not None:
        headers.update(
            {
                "X-HubSpot-RateLimit-Interval-Milliseconds": str(int(limits.window_seconds * 1000)),
                "X-HubSpot-RateLimit-Max": str(limits.ten_secondly),
                "X-HubSpot-RateLimit-Remaining": str(max(0, limits.ten_secondly - recent)),
            }
        )
    if limits.daily is not None:
        headers.update(
            {
                "X-HubSpot-RateLimit-Daily": str(limits.daily),
                "X-HubSpot-RateLimit-Daily-Remaining": str(max(0, limits.daily - daily)),
            }
        )
    return headers
