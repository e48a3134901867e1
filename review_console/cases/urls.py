"""Routes of the cases room: the home, the queue, the case page and its decisions."""

from django.urls import path

from review_console.cases import (
    views,
    views_bulk,
    views_day,
    views_decisions,
    views_duplicate_rule,
    views_hold,
    views_merge,
)

# The pages of one case named case-<what> are at cases/<id>/<what>/.
ONE_CASE = {
    "case-reopen": views_day.case_reopen_view,
    "case-hand-on": views_decisions.case_hand_on_view,
    "case-reveal": views_day.case_reveal,
    "case-lookup": views_decisions.case_lookup,
    "case-replay": views_decisions.case_replay,
    "case-resolve": views_decisions.case_resolve,
    "case-resolve-found": views_decisions.case_resolve_found,
    "case-close": views_decisions.case_close_view,
    "case-compare": views_merge.case_compare,
    "case-email": views_decisions.case_email,
    "case-merge": views_merge.case_merge,
    "case-not-duplicate": views_merge.case_not_duplicate,
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
    *(
        path(f"cases/<int:case_id>/{name.removeprefix('case-')}/", view, name=name)
        for name, view in ONE_CASE.items()
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
    path("bulk-replays/", views_bulk.bulk_replay_list, name="bulk-replay-list"),
    path("bulk-replays/new/", views_bulk.bulk_replay_new, name="bulk-replay-new"),
    path("bulk-replays/<int:job_id>/", views_bulk.bulk_replay_detail, name="bulk-replay-detail"),
]
