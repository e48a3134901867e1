"""Routes of the settings room (Settings admins), and each person's notifications."""

from django.urls import path

from review_console.settings import views, views_routing

# A section's actions named settings-<what> are at settings/<source>/<form>/<section>/<what>/.
SECTION = "settings/<str:source>/<str:form>/<str:section>/"

urlpatterns = [
    path("notifications/", views_routing.notifications_choice, name="notifications"),
    path("settings/", views.settings_home, name="settings"),
    path("settings/review/", views_routing.settings_review, name="settings-review"),
    # Before settings/<source>/<form>/, which "versions/<number>/" would match too.
    path("settings/versions/", views.settings_versions, name="settings-versions"),
    path("settings/versions/<int:number>/", views.settings_version, name="settings-version"),
    path(
        "settings/versions/<int:number>/restore/",
        views.settings_restore,
        name="settings-restore",
    ),
    path("settings/<str:source>/<str:form>/", views.settings_form, name="settings-form"),
    path(SECTION, views.settings_section, name="settings-section"),
    path(f"{SECTION}preview/", views.settings_preview, name="settings-preview"),
    path(f"{SECTION}save/", views.settings_save, name="settings-save"),
    path(f"{SECTION}test/", views.settings_test_send, name="settings-test-send"),
]
