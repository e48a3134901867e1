"""Routes of the staff review console under /console/ (namespace "console")."""

from django.urls import include, path

from review_console import (
    api,
    reconciliation_views,
    views,
    views_day,
    views_duplicate_rule,
    views_field_map,
    views_hold,
    views_journey,
    views_privacy,
    views_routing,
    views_settings,
    views_sources,
    views_submissions,
)

app_name = "console"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("cases/", views.case_list, name="case-list"),
    path("cases/take/", views.case_take, name="case-take"),
    path("cases/next/", views_day.case_next, name="case-next"),
    path("cases/settle/", views_day.cases_settle, name="cases-settle"),
    path("cases/causes/settle/", views_day.cause_settle, name="cause-settle"),
    path(
        "cases/causes/holds/<int:hold_id>/stop/",
        views_day.cause_hold_stop_view,
        name="cause-hold-stop",
    ),
    path("cases/<int:case_id>/reopen/", views_day.case_reopen_view, name="case-reopen"),
    path("cases/<int:case_id>/hand-on/", views_routing.case_hand_on_view, name="case-hand-on"),
    path("notifications/", views_routing.notifications_choice, name="notifications"),
    path("cases/<int:case_id>/reveal/", views_day.case_reveal, name="case-reveal"),
    path("cases/<int:case_id>/", views.case_detail, name="case-detail"),
    path("cases/<int:case_id>/lookup/", views.case_lookup, name="case-lookup"),
    path("cases/<int:case_id>/replay/", views.case_replay, name="case-replay"),
    path("cases/<int:case_id>/resolve/", views.case_resolve, name="case-resolve"),
    path(
        "cases/<int:case_id>/resolve-found/",
        views.case_resolve_found,
        name="case-resolve-found",
    ),
    path("cases/<int:case_id>/close/", views.case_close_view, name="case-close"),
    path("cases/<int:case_id>/compare/", views.case_compare, name="case-compare"),
    path("cases/<int:case_id>/email/", views.case_email, name="case-email"),
    path("search/", views_submissions.search, name="search"),
    path(
        "submissions/<uuid:event_id>/",
        views_submissions.submission_detail,
        name="submission-detail",
    ),
    path("cases/<int:case_id>/merge/", views.case_merge, name="case-merge"),
    path(
        "cases/<int:case_id>/not-duplicate/",
        views.case_not_duplicate,
        name="case-not-duplicate",
    ),
    path("cases/<int:case_id>/same-enquiry/", views_hold.case_hold_same, name="case-hold-same"),
    path(
        "cases/<int:case_id>/separate-enquiry/",
        views_hold.case_hold_separate,
        name="case-hold-separate",
    ),
    path(
        "cases/<int:case_id>/duplicate-rule/link/",
        views_duplicate_rule.case_duplicate_rule_link,
        name="case-duplicate-rule-link",
    ),
    path(
        "cases/<int:case_id>/duplicate-rule/create-anyway/",
        views_duplicate_rule.case_duplicate_rule_create,
        name="case-duplicate-rule-create",
    ),
    path("bulk-replays/", views.bulk_replay_list, name="bulk-replay-list"),
    path("bulk-replays/new/", views.bulk_replay_new, name="bulk-replay-new"),
    path("bulk-replays/<int:job_id>/", views.bulk_replay_detail, name="bulk-replay-detail"),
    path("audit/", views.audit_list, name="audit-list"),
    path("audit/export.csv", views.audit_export, name="audit-export"),
    path("sources/", views_sources.source_list, name="source-list"),
    path("sources/<int:source_id>/", views_sources.source_detail, name="source-detail"),
    path("sources/<int:source_id>/disable/", views_sources.source_disable, name="source-disable"),
    path("sources/<int:source_id>/enable/", views_sources.source_enable_view, name="source-enable"),
    path(
        "sources/<int:source_id>/settings/",
        views_sources.source_settings_view,
        name="source-settings",
    ),
    path(
        "sources/<int:source_id>/secrets/add/",
        views_sources.source_secret_add_view,
        name="source-secret-add",
    ),
    path(
        "sources/<int:source_id>/secrets/remove/",
        views_sources.source_secret_remove_view,
        name="source-secret-remove",
    ),
    path(
        "sources/<int:source_id>/captcha/",
        views_sources.source_captcha_view,
        name="source-captcha",
    ),
    path(
        "sources/<int:source_id>/field-map/",
        views_field_map.source_field_map,
        name="source-field-map",
    ),
    path(
        "sources/<int:source_id>/field-map/preview/",
        views_field_map.source_field_map_preview,
        name="source-field-map-preview",
    ),
    path(
        "sources/<int:source_id>/field-map/save/",
        views_field_map.source_field_map_save,
        name="source-field-map-save",
    ),
    path(
        "sources/<int:source_id>/field-map/apply/",
        views_field_map.source_field_map_apply,
        name="source-field-map-apply",
    ),
    path(
        "journey/<str:source>/<path:form>/",
        views_journey.journey,
        name="journey",
    ),
    # The business configuration (views_settings.py): Settings admins.
    path("settings/", views_settings.settings_home, name="settings"),
    path("settings/review/", views_routing.settings_review, name="settings-review"),
    path("settings/versions/", views_settings.settings_versions, name="settings-versions"),
    path(
        "settings/versions/<int:number>/",
        views_settings.settings_version,
        name="settings-version",
    ),
    path(
        "settings/versions/<int:number>/restore/",
        views_settings.settings_restore,
        name="settings-restore",
    ),
    path(
        "settings/<str:source>/<str:form>/",
        views_settings.settings_form,
        name="settings-form",
    ),
    path(
        "settings/<str:source>/<str:form>/<str:section>/",
        views_settings.settings_section,
        name="settings-section",
    ),
    path(
        "settings/<str:source>/<str:form>/<str:section>/preview/",
        views_settings.settings_preview,
        name="settings-preview",
    ),
    path(
        "settings/<str:source>/<str:form>/<str:section>/save/",
        views_settings.settings_save,
        name="settings-save",
    ),
    path(
        "settings/<str:source>/<str:form>/<str:section>/test/",
        views_settings.settings_test_send,
        name="settings-test-send",
    ),
    path("privacy/", views_privacy.privacy, name="privacy"),
    path("privacy/export/", views_privacy.privacy_export, name="privacy-export"),
    path("privacy/erase/", views_privacy.privacy_erase, name="privacy-erase"),
    path("api/", include(api.router.urls)),
    path(
        "reconciliation/",
        reconciliation_views.reconciliation_runs,
        name="reconciliation-runs",
    ),
    path(
        "reconciliation/<int:run_id>/",
        reconciliation_views.reconciliation_run,
        name="reconciliation-run",
    ),
]
