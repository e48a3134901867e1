"""Routes of the staff review console under /console/ (namespace "console").

Each room keeps its own routes in <room>/urls.py, with their whole paths and names;
the staff API's are in api.py.
"""

from django.urls import include, path

from review_console import api

app_name = "console"

ROOMS = (
    "cases",
    "submissions",
    "audit",
    "sources",
    "journey",
    "settings",
    "privacy",
    "reconciliation",
)

urlpatterns = [
    *(path("", include(f"review_console.{room}.urls")) for room in ROOMS),
    path("api/", include(api.router.urls)),
]
