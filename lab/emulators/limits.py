"""Rolling request windows: how the vendor emulators count what their vendors limit.

Salesforce counts an org's API requests over the last 24 hours, Pipedrive a
token's requests over the last 2 seconds, Dataverse a user's requests over the
last 300 seconds (each emulator's docstring names the vendor's page). All three
are a rolling window: a request is admitted while fewer than `limit` units were
spent in the last `seconds`, and room comes back as the oldest ones age out,
never all at once at a boundary.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable


class RollingWindow:
    """`limit` units in any `seconds`, counted per key (a token, a user, an org)."""

    def __init__(
        self, limit: int, seconds: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.seconds = seconds
        self._clock = clock
        self._spent: dict[str, deque[tuple[float, int]]] = {}
        self._lock = threading.Lock()

    def take(self, key: str, units: int = 1) -> float | None:
        """Spends `units` and returns None, or spends nothing and returns the seconds
        until enough of the window has aged out for them."""
        with self._lock:
            now = self._clock()
            spent = self._aged(key, now)
            used = sum(n for _, n in spent)
            if used + units <= self.limit:
                spent.append((now, units))
                return None
            # The oldest entries leave first: wait until enough of them have.
            freed = 0
            for at, n in spent:
                freed += n
                if used - freed + units <= self.limit:
                    return max(0.0, at + self.seconds - now)
            return self.seconds

    def used(self, key: str) -> int:
        with self._lock:
            return sum(n for _, n in self._aged(key, self._clock()))

    def remaining(self, key: str) -> int:
        return max(0, self.limit - self.used(key))

    def reset_seconds(self, key: str) -> int:
        """Whole seconds until the oldest unit in the window ages out (the full
        window when it is empty): when room next comes back."""
        with self._lock:
            now = self._clock()
            spent = self._aged(key, now)
            until = spent[0][0] + self.seconds - now if spent else self.seconds
        return max(1, math.ceil(until))

    def clear(self) -> None:
        with self._lock:
            self._spent.clear()

    def _aged(self, key: str, now: float) -> deque[tuple[float, int]]:
        spent = self._spent.setdefault(key, deque())
        while spent and spent[0][0] <= now - self.seconds:
            spent.popleft()
        return spent
