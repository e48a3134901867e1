"""Routes of the reconciliation room: the runs and one run's findings."""

from django.urls import path

from review_console.reconciliation import views

urlpatterns = [
    path("reconciliation/", views.reconciliation_runs, name="reconciliation-runs"),
    path("reconciliation/<int:run_id>/", views.reconciliation_run, name="reconciliation-run"),
]
