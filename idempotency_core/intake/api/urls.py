"""Routes of the ingest API under /api/v1/."""

from django.urls import path

from idempotency_core.intake.api.views import SubmissionCreateView, SubmissionDetailView

urlpatterns = [
    path("submissions/", SubmissionCreateView.as_view(), name="submission-create"),
    path("submissions/<uuid:event_id>/", SubmissionDetailView.as_view(), name="submission-detail"),
]
