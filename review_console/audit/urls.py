"""Routes of the audit room: the trail and its CSV export."""

from django.urls import path

from review_console.audit import views

urlpatterns = [
    path("audit/", views.audit_list, name="audit-list"),
    path("audit/export.csv", views.audit_export, name="audit-export"),
]
