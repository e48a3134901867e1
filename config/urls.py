"""Top-level URL configuration: ingest API, OpenAPI schema, console, auth, admin."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

urlpatterns = [
    path("api/v1/", include("idempotency_core.intake.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("console/", include("review_console.urls")),
    path("admin/", admin.site.urls),
]
