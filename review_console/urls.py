"""Routes of the staff review console under /console/."""

from django.urls import path

from review_console import views

app_name = "console"

urlpatterns = [
    path("", views.case_list, name="case-list"),
]
