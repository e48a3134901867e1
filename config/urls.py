"""Top-level URL configuration: ingest API, hooks, OpenAPI schema, console, auth, admin."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from idempotency_core.intake.api import hooks

urlpatterns = [
    path("api/v1/", include("idempotency_core.intake.api.urls")),
    # Senders' own formats (CONTRACT.md, "Senders"): signed, or a token in the path.
    path("hooks/<str:source_name>/", hooks.hook, name="hook"),
    path("hooks/<str:source_name>/t/<str:token>/", hooks.hook, name="hook-token"),
    path("hooks/<str:source_name>/form.js", hooks.form_script, name="hook-form-js"),
    path("hooks/<str:source_name>/t/<str:token>/form.js", hooks.form_script),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("console/", include("review_console.urls")),
    path("admin/", admin.site.urls),
]
