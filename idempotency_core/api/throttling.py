"""Per-source request rate (429 with Retry-After beyond it).

Counts live in Django's cache: per process with the default local-memory cache,
shared when CACHES points at a shared backend. It protects the service from a
runaway sender; it is not a guarantee, so nothing else relies on it.
"""

from __future__ import annotations

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle
from rest_framework.views import APIView

from idempotency_core.models import Source


class SourceRateThrottle(SimpleRateThrottle):
    scope = "source"

    def get_rate(self) -> str | None:
        return None  # chosen per request, from the source

    def allow_request(self, request: Request, view: APIView) -> bool:
        source = request.auth
        if not isinstance(source, Source):
            return True
        per_minute = source.rate_per_minute or settings.ONEFOLD_DEFAULT_RATE_PER_MINUTE
        self.rate = f"{per_minute}/min"
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)

    def get_cache_key(self, request: Request, view: APIView) -> str:
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}
