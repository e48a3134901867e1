"""Top-level URL configuration: ingest API, hooks, probes and metrics, OpenAPI schemas and
docs, console, auth, admin.

Two schemas. /api/schema/ is public and documents what senders call: the routes
in `public_api`, the hooks among them (written from the presets, since they are
not DRF views). /console/api/schema/ documents the staff API and, like the
console, needs a staff sign-in. Each is drf-spectacular's view over its own list
of routes (its `urlconf`) rather than one schema filtered afterwards, so a new
staff endpoint cannot appear in the public schema by accident. Swagger UI for
each comes from drf-spectacular-sidecar's files (settings), never a CDN.
"""

from collections.abc import Callable
from functools import wraps
from typing import Any

from csp.decorators import csp_update
from django.conf import settings
from django.contrib import admin
from django.contrib.auth import urls as auth_urls
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from idempotency_core.intake.api import hook_schema, hooks
from idempotency_core.observability import health, metrics
from review_console.permissions import VIEW_CASES, console_permission

# What senders call: the ingest API and the hooks (docs/senders.md).
public_api = [
    path("api/v1/", include("idempotency_core.intake.api.urls")),
    # Senders' own formats: signed, or a token in the path.
    path("hooks/<str:source_name>/", hooks.hook, name="hook"),
    path("hooks/<str:source_name>/t/<str:token>/", hooks.hook, name="hook-token"),
    path("hooks/<str:source_name>/form.js", hooks.form_script, name="hook-form-js"),
    path("hooks/<str:source_name>/t/<str:token>/form.js", hooks.form_script),
]
# The staff API lives under /console/api/; the console's HTML views in the same
# include are not API views, so the schema generator passes over them.
staff_api = [path("console/", include("review_console.urls"))]

# drf-spectacular's Swagger page keeps three rules of its own in an inline
# <style>; the CSP admits exactly that text by its hash (tests recompute it from
# the installed template, so an upgrade that changes it fails there, not in a browser).
SWAGGER_UI_STYLE_HASH = "'sha256-MMpT0iDxyjALd9PdfepImGX3DBfJPXZ4IlDWdPAgtn0='"
swagger_csp = csp_update({"style-src": [SWAGGER_UI_STYLE_HASH]})


def _password_reset_configured(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """404 unless ONEFOLD_PASSWORD_RESET is on (read per request). Reset mails a
    sign-in link to staff: without mail set up for them it is only a way to send
    mail on anyone's behalf."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.ONEFOLD_PASSWORD_RESET:
            raise Http404("Password reset is not enabled.")
        return view(request, *args, **kwargs)

    return wrapped


# django.contrib.auth's own routes (login, logout, password change and reset),
# the four password_reset* ones behind the setting above.
accounts = [
    path(str(route.pattern), _password_reset_configured(route.callback), name=route.name)
    if isinstance(route, URLPattern) and (route.name or "").startswith("password_reset")
    else route
    for route in auth_urls.urlpatterns
]

urlpatterns = [
    # The site's root is the console (its login page for anyone signed out).
    path("", RedirectView.as_view(pattern_name="console:dashboard"), name="root"),
    *public_api,
    # Operations (docs/operations.md): probes and Prometheus, outside the API and its schema.
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics, name="metrics"),
    path(
        "api/schema/",
        SpectacularAPIView.as_view(
            urlconf=public_api,
            # The hooks are plain Django views, which drf-spectacular does not see:
            # their paths are written from the presets (intake/api/hook_schema.py).
            custom_settings={
                "APPEND_PATHS": hook_schema.hook_paths(),
                "APPEND_COMPONENTS": hook_schema.hook_components(),
            },
        ),
        name="schema",
    ),
    path(
        "api/docs/",
        swagger_csp(SpectacularSwaggerSplitView.as_view(url_name="schema")),
        name="api-docs",
    ),
    path(
        "console/api/schema/",
        console_permission(VIEW_CASES)(
            SpectacularAPIView.as_view(
                urlconf=staff_api,
                custom_settings={
                    "TITLE": "Onefold staff API",
                    "DESCRIPTION": "Review cases and their actions, for staff who script "
                    "their reviews. Session authentication; same permissions as the console.",
                },
            )
        ),
        name="console-api-schema",
    ),
    path(
        "console/api/docs/",
        console_permission(VIEW_CASES)(
            swagger_csp(SpectacularSwaggerSplitView.as_view(url_name="console-api-schema"))
        ),
        name="console-api-docs",
    ),
    path("accounts/", include(accounts)),
    path("console/", include("review_console.urls")),
    path("admin/", admin.site.urls),
]
