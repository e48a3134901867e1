"""The JSON API's per-source rate (429 with Retry-After beyond it): `intake.rate`, the
count the hooks share, as a DRF throttle."""

from __future__ import annotations

import time

from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from idempotency_core.intake.rate import WINDOW_SECONDS, source_rate_wait
from idempotency_core.models import Source

__all__ = ["WINDOW_SECONDS", "SourceRateThrottle"]


class SourceRateThrottle(BaseThrottle):
    clock = staticmethod(time.time)
    wait_seconds: float | None = None

    def allow_request(self, request: Request, view: APIView) -> bool:
        source = request.auth
        if not isinstance(source, Source):
            return True
        self.wait_seconds = source_rate_wait(source, clock=self.clock)
        return self.wait_seconds is None

    def wait(self) -> float | None:
        return self.wait_seconds
