"""Routes of the privacy room: a person's data exported or erased."""

from django.urls import path

from review_console.privacy import views

urlpatterns = [
    path("privacy/", views.privacy, name="privacy"),
    path("privacy/export/", views.privacy_export, name="privacy-export"),
    path("privacy/erase/", views.privacy_erase, name="privacy-erase"),
]
