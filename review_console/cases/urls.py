"""Routes of the cases room: the home, the queue, the case page and its decisions."""

from django.urls import path

from review_console.cases import (
    views,
    views_bulk,
    views_day,
    views_decisions,
    views_duplicate_rule,
    views_merge,
    views_reason,
)
from review_console.routes import one_object_routes

# The pages of one case named case-<what> are at cases/<id>/<what>/, or at PATHS.
ONE_CASE = {
    **views_reason.VIEWS,
    "case-reveal": views_day.case_reveal,
    "case-lookup": views_decisions.case_lookup,
    "case-replay": views_decisions.case_replay,
    "case-resolve": views_decisions.case_resolve,
    "case-resolve-found": views_decisions.case_resolve_found,
    "case-close": views_decisions.case_close_view,
    "case-compare": views_merge.case_compare,
    "case-email": views_decisions.case_email,
    "case-merge": views_merge.case_merge,
    "case-duplicate-rule-link": views_duplicate_rule.case_duplicate_rule_link,
}
PATHS = {
    "case-hold-same": "same-enquiry",
    "case-hold-separate": "separate-enquiry",
    "case-duplicate-rule-link": "duplicate-rule/link",
    "case-duplicate-rule-create": "duplicate-rule/create-anyway",
}

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("cases/", views.case_list, name="case-list"),
    path("cases/take/", views_decisions.case_take, name="case-take"),
    path("cases/next/", views_day.case_next, name="case-next"),
    path("cases/settle/", views_day.cases_settle, name="cases-settle"),
    path("cases/causes/settle/", views_day.cause_settle, name="cause-settle"),
    path(
        "cases/causes/holds/<int:hold_id>/stop/",
        views_day.cause_hold_stop_view,
        name="cause-hold-stop",
    ),
    path("cases/<int:case_id>/", views.case_detail, name="case-detail"),
    *one_object_routes("cases/<int:case_id>/", ONE_CASE, PATHS),
    path("bulk-replays/", views_bulk.bulk_replay_list, name="bulk-replay-list"),
    path("bulk-replays/new/", views_bulk.bulk_replay_new, name="bulk-replay-new"),
    path("bulk-replays/<int:job_id>/", views_bulk.bulk_replay_detail, name="bulk-replay-detail"),
]
