"""`Authorization: Api-Key <key>` identifies a source."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from idempotency_core.intake.sources import source_for_working_api_key
from idempotency_core.models import Source

if TYPE_CHECKING:
    from drf_spectacular.openapi import AutoSchema

KEYWORD = "Api-Key"


class SourceApiKeyAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[AnonymousUser, Source] | None:
        header = authentication.get_authorization_header(request).decode(errors="replace")
        scheme, _, key = header.partition(" ")
        if scheme != KEYWORD:
            return None
        key = key.strip()
        if not key:
            raise exceptions.AuthenticationFailed("Empty API key.")
        # A rotated key keeps working until the end of its overlap, then is refused
        # exactly like a revoked one.
        source = source_for_working_api_key(key)
        if source is None:
            raise exceptions.AuthenticationFailed("Unknown, revoked or expired API key.")
        if not source.is_active:
            raise exceptions.PermissionDenied("This source is disabled.")
        return AnonymousUser(), source

    def authenticate_header(self, request: Request) -> str:
        # Makes DRF answer 401 (not 403) when the key is missing or wrong.
        return KEYWORD


class SourceApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = SourceApiKeyAuthentication
    name = "ApiKey"

    def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, Any]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Api-Key <key>`, as printed by `manage.py create_source`.",
        }
