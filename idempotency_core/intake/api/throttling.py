"""Per-source request rate (429 with Retry-After beyond it).

A fixed one-minute window per source, counted with the cache's atomic increment:
no request is admitted over the limit even when many arrive at once. With the
default local-memory cache each web process counts for itself; with
`CACHE_URL=redis://…` every process shares one count per source. It protects
the service from a runaway sender; nothing else relies on it.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.core.cache import cache
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from idempotency_core.models import Source

WINDOW_SECONDS = 60


def source_rate_key(source_id: int, window: int) -> str:
    return f"rate:source:{source_id}:{window}"


class SourceRateThrottle(BaseThrottle):
    clock = staticmethod(time.time)
    wait_seconds: float | None = None

    def allow_request(self, request: Request, view: APIView) -> bool:
        source = request.auth
        if not isinstance(source, Source):
            return True
        limit = source.rate_per_minute or settings.ONEFOLD_DEFAULT_RATE_PER_MINUTE
        now = self.clock()
        window = int(now // WINDOW_SECONDS)
        key = source_rate_key(source.pk, window)
        # The key outlives its window a little, so it never expires while counted.
        cache.add(key, 0, timeout=WINDOW_SECONDS + 5)
        try:
            count = cache.incr(key)
        except ValueError:  # evicted between add and incr: this request opens the count
            cache.add(key, 1, timeout=WINDOW_SECONDS + 5)
            count = 1
        self.wait_seconds = (window + 1) * WINDOW_SECONDS - now
        return count <= limit

    def wait(self) -> float | None:
        return self.wait_seconds
