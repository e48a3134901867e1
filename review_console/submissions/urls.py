"""Routes of the submissions room: the customer search and a submission's page."""

from django.urls import path

from review_console.submissions import views

urlpatterns = [
    path("search/", views.search, name="search"),
    path("submissions/<uuid:event_id>/", views.submission_detail, name="submission-detail"),
]
