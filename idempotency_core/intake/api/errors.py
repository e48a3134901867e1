"""Error bodies: every refusal carries a machine-readable `code` beside DRF's `detail`."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    codes = getattr(exc, "get_codes", lambda: None)()
    if isinstance(response.data, dict) and "code" not in response.data:
        if isinstance(codes, str):
            response.data["code"] = codes
        elif isinstance(codes, dict):
            response.data = {"code": "invalid", "detail": "Invalid body.", "errors": response.data}
    elif isinstance(response.data, list):
        response.data = {"code": "invalid", "detail": "Invalid body.", "errors": response.data}
    return response
