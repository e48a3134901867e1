"""Per-source request rate: a fixed one-minute window per source, counted with the
cache's atomic increment, so no request is admitted over the limit even when many
arrive at once. With the default local-memory cache each web process counts for
itself; with `CACHE_URL=redis://…` every process shares one count per source. It
protects the service from a runaway sender; nothing else relies on it. The JSON
API's throttle and the hooks share it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.conf import settings
from django.core.cache import cache

from idempotency_core.models import Source

WINDOW_SECONDS = 60


def source_rate_key(source_id: int, window: int) -> str:
    return f"rate:source:{source_id}:{window}"


def source_rate_wait(source: Source, *, clock: Callable[[], float] = time.time) -> float | None:
    """Counts one request; None when it is admitted, else seconds until the next window."""
    limit = source.rate_per_minute or settings.ONEFOLD_DEFAULT_RATE_PER_MINUTE
    now = clock()
    window = int(now // WINDOW_SECONDS)
    key = source_rate_key(source.pk, window)
    # The key outlives its window a little, so it never expires while counted.
    cache.add(key, 0, timeout=WINDOW_SECONDS + 5)
    try:
        count = cache.incr(key)
    except ValueError:  # evicted between add and incr: this request opens the count
        cache.add(key, 1, timeout=WINDOW_SECONDS + 5)
        count = 1
    if count <= limit:
        return None
    return (window + 1) * WINDOW_SECONDS - now
