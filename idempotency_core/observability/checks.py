"""System check: /metrics open to anyone on a server that names a public host."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register

# The same test of a host as onefold.E008's (the development key beyond loopback).
from idempotency_core.checks import is_loopback


@register(Tags.security)
def check_metrics_protected(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """The figures name sources and destinations and show the volume of work:
    not for anyone who can reach the server. On loopback (`make run`) they may be open."""
    if settings.DEBUG or settings.ONEFOLD_METRICS_TOKEN or settings.ONEFOLD_METRICS_ALLOW_IPS:
        return []
    public = [host for host in settings.ALLOWED_HOSTS if not is_loopback(host)]
    if not public:
        return []
    return [
        Warning(
            f"/metrics is served to anyone who reaches {', '.join(public)}.",
            hint="Set ONEFOLD_METRICS_TOKEN or ONEFOLD_METRICS_ALLOW_IPS (docs/operations.md).",
            id="onefold.W002",
        )
    ]
