"""Error bodies: every refusal carries a machine-readable `code` beside DRF's `detail`
(the schema's Error: `code` and `detail` always, `errors` for field errors)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    # DRF converts Django's own exceptions inside its handler, after which their codes
    # could no longer be read: convert them first so that a 404 from get_object()
    # says `not_found` like every other 404.
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(*exc.args)
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args)
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
        # A list of messages is about the body as a whole: `errors` stays an object.
        errors = {api_settings.NON_FIELD_ERRORS_KEY: response.data}
        response.data = {"code": "invalid", "detail": "Invalid body.", "errors": errors}
    return response
