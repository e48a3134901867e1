"""Routes of the journey room: a form's customer journey."""

from django.urls import path

from review_console.journey import views

urlpatterns = [
    path("journey/<str:source>/<path:form>/", views.journey, name="journey"),
]
